"""``marinbuild serve`` over a ``gs://`` prefix (fake-gcs-server): the graph, a step, its files, runs."""

from __future__ import annotations

import json
from pathlib import Path

from serve_ws import Server, mb
from workspaces import write_workspace

STEPS = """
import fsspec


def write(config):
    with fsspec.open(config["output_path"] + "/out.txt", "w") as f:
        f.write("written")
    with fsspec.open(config["output_path"] + "/logs/run.log", "w") as f:
        f.write("".join(f"line {i}\\n" for i in range(10)))


def fail(config):
    raise RuntimeError("fails on purpose")
"""

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "steps:write", config = {"v": 1})
python_step(name = "b", fn = "steps:write", config = {"v": 1}, deps = [":a"])
python_step(name = "bad", fn = "steps:fail", config = {})
python_step(name = "never", fn = "steps:write", config = {"v": 1})
"""


def test_serve_shows_a_gs_prefix(gs_prefix: str, tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"steps.py": STEPS, "pipe/BUILD.marin": BUILD})
    proc = mb(ws, "-k", "--prefix", gs_prefix, "//pipe:a", "//pipe:b", "//pipe:bad")
    assert proc.returncode == 1, proc.stderr
    server = Server(ws, "--prefix", gs_prefix)
    try:
        nodes = {n["name"]: n for n in server.json("/api/graph")["nodes"]}
        assert {name: n["state"] for name, n in nodes.items()} == {
            "pipe/a": "built",
            "pipe/b": "built",
            "pipe/bad": "failed",
            "pipe/never": "missing",
        }
        assert nodes["pipe/a"]["id"].startswith(gs_prefix + "/pipe/a-")
        step = server.json(f"/api/step/{nodes['pipe/b']['relative']}")
        assert "up to date" in step["why"] and {"out.txt", "logs/run.log"} <= {f["name"] for f in step["files"]}
        assert step["logs"][0]["tail"] == "".join(f"line {i}\n" for i in range(10))
        assert (
            "RuntimeError: fails on purpose" in server.json(f"/api/step/{nodes['pipe/bad']['relative']}")["traceback"]
        )
        status, _, body = server.get(f"/file/{nodes['pipe/a']['relative']}/out.txt")
        assert (status, body) == (200, "written")
        assert server.get(f"/file/{nodes['pipe/a']['relative']}/nothing.txt")[0] == 404
        assert server.get("/file/pipe/%2e%2e/x")[0] == 400
        runs = server.json("/api/runs")
        assert runs["builds"][0]["failed"] == ["pipe/bad"] and runs["run_infos"]
        info = server.json("/api/experiment?path=" + runs["run_infos"][0]["path"])
        assert {s["name"]: s["state"] for s in info["steps"]}["pipe/a"] == "built"
        assert json.loads(server.get("/api/training")[2]) == {"prefix": gs_prefix, "runs": []}
    finally:
        server.stop()
