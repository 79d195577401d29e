"""Lineage both ways, from what the prefix records: ``cache show PATH`` names the target and runs that made an
output and those that used it (outputs of targets since changed, and of Marin scripts, too), and ``query --outputs``
answers "which models were trained on this dataset" over every built version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from workspaces import write_workspace

from marinbuild.executor import Executor, ExecutorStep, output_path_of, this_output_path

STEPS = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    open(os.path.join(config["output_path"], "out"), "w").write(repr(config))
"""
BUILD = """load("@marinbuild//rules:python.py", "python_step")

python_step(name = "data", fn = "lin_steps:write", config = {{}})
python_step(name = "model1", fn = "lin_steps:write", config = {{"lr": {lr}}}, deps = [":data"])
python_step(name = "model2", fn = "lin_steps:write", config = {{}}, deps = [":data"])
python_step(name = "unrelated", fn = "lin_steps:write", config = {{}})
"""


def marinbuild(ws: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    env["PYTHONPATH"] = os.pathsep.join([str(ws), *sys.path])
    done = subprocess.run([sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def write_marker(config: dict) -> None:
    os.makedirs(config["output_path"], exist_ok=True)


def test_lineage_both_ways_over_every_built_version(tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"lin_steps.py": STEPS, "m/BUILD.marin": BUILD.format(lr=1)})
    marinbuild(ws, "//m:all")
    (ws / "m/BUILD.marin").write_text(BUILD.format(lr=2))  # a second version of model1; the first stays built
    marinbuild(ws, "//m:all")
    out = ws / "out"
    (data,) = out.glob("m/data-*")
    # A Marin script's two steps (no target), on the same prefix.
    raw = ExecutorStep(name="raw/marin", fn=write_marker, config={"output_path": this_output_path()})
    tok = ExecutorStep(
        name="tok/marin", fn=write_marker, config={"raw": output_path_of(raw), "output_path": this_output_path()}
    )
    Executor(prefix=str(out), executor_info_base_path=str(out / "experiments"), listeners=[]).run([tok])

    shown = json.loads(marinbuild(ws, "cache", "show", str(data), "--output", "json"))
    (lineage,) = (o["lineage"] for o in shown["outputs"])
    assert lineage["made_by"]["label"] == "//m:data" and len(lineage["made_by"]["runs"]) == 2
    used = {(u["label"], u["name"]) for u in lineage["used_by"]}
    assert used == {("//m:model1", "m/model1"), ("//m:model2", "m/model2")}
    assert len([u for u in lineage["used_by"] if u["label"] == "//m:model1"]) == 2  # both versions
    assert all(u["runs"] for u in lineage["used_by"])
    text = marinbuild(ws, "cache", "show", str(data))
    assert "made by:   //m:data; listed by 2 run(s)" in text and "(//m:model2), in 2 run(s)" in text

    (model2,) = out.glob("m/model2-*")
    reads = json.loads(marinbuild(ws, "cache", "show", "m/" + model2.name, "--output", "json"))["outputs"][0]
    assert [i["label"] for i in reads["lineage"]["inputs"]] == ["//m:data"]

    models = marinbuild(ws, "query", "--outputs", "kind(python_step, rdeps(//..., m/data-*)) - m/data-*")
    assert sorted(line.split("-")[0] for line in models.split()) == ["m/model1", "m/model1", "m/model2"]
    everything = marinbuild(ws, "query", "--outputs", "rdeps(//..., //m:data)", "--output", "label_kind")
    assert everything.count("python_step rule m/") == 4 and "unrelated" not in everything
    (raw_out,) = out.glob("raw/marin-*")
    script = json.loads(marinbuild(ws, "cache", "show", str(raw_out), "--output", "json"))["outputs"][0]["lineage"]
    assert script["made_by"]["label"] is None and [u["name"] for u in script["used_by"]] == ["tok/marin"]
    assert "script_step rule tok/marin-" in marinbuild(
        ws, "query", "--outputs", "rdeps(//..., raw/*)", "--output", "label_kind"
    )
