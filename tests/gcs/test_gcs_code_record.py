"""The record of the code a step ran, on a ``gs://`` prefix (fake-gcs-server, the real CLI in a subprocess).

The full path reads every built step's record in one concurrent round (``store.batch.read_many``); a step whose code
outside its key changed is reported, not rebuilt, and a step without a record has nothing to say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workspaces import write_workspace

from marinbuild.store import batch, gcs

HERE = Path(__file__).parent
REPO = HERE.parent.parent
STEPS = """
import os


def write(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["name"] + "\\n")
    from marinbuild.store import fs

    fs.write_atomic(config["output_path"] + "/out.txt", config["name"].encode())
"""
BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "loose1", fn = "gcs_code_steps:write", config = {"name": "loose1"}, code_in_key = False)
python_step(name = "loose2", fn = "gcs_code_steps:write", config = {"name": "loose2"}, code_in_key = False)
python_step(name = "keyed", fn = "gcs_code_steps:write", config = {"name": "keyed"})
"""


def _mb(ws: Path, prefix: str, calls: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARINBUILD_SERVE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["MB_CALLS"] = str(calls)
    command = [sys.executable, "-m", "marinbuild", "//...", "--prefix", prefix]
    return subprocess.run(command, cwd=ws, env=env, capture_output=True, text=True, timeout=120)


def test_changed_code_outside_the_key_is_reported_on_gcs(gs_prefix: str, tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"gcs_code_steps.py": STEPS, "pipe/BUILD.marin": BUILD})
    calls = tmp_path / "calls.log"
    assert _mb(ws, gs_prefix, calls).returncode == 0
    assert sorted(calls.read_text().split()) == ["keyed", "loose1", "loose2"]
    (record,) = gcs.filesystem().glob(gs_prefix + "/pipe/loose2-*/.marinbuild_code.json")
    gcs.filesystem().rm(record)  # built before code was recorded: nothing to say about it
    calls.write_text("")
    steps = ws / "gcs_code_steps.py"
    steps.write_text(steps.read_text() + "\n# a comment\n")

    done = _mb(ws, gs_prefix, calls)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split() == ["keyed"]
    warnings = [line for line in done.stderr.splitlines() if "warning: code changed" in line]
    assert len(warnings) == 1 and "1 output(s)" in warnings[0] and "gcs_code_steps.py" in warnings[0], done.stderr


def test_read_many_reads_gcs_and_local_paths_in_order(gs_prefix: str, tmp_path: Path) -> None:
    gcs.filesystem().pipe_file(gs_prefix + "/a/x", b"one")
    gcs.filesystem().pipe_file(gs_prefix + "/b/x", b"two")
    (tmp_path / "local").write_bytes(b"three")
    paths = [gs_prefix + "/b/x", str(tmp_path / "local"), gs_prefix + "/missing", gs_prefix + "/a/x"]
    paths.append(str(tmp_path / "missing"))
    assert batch.read_many(paths) == [b"two", b"three", None, b"one", None]
