"""``mirrored(path, budget_gb = N)`` in a BUILD file does what Marin's ``mirrored()`` does on a step: the step's
function gets ``mirror://path``, the version is the plain path's (wrapping a path in it rebuilds nothing), the
step's mirror budget is N; a wrong argument is one located line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import assert_one_line_load_error, write_workspace

from marinbuild.core.walk import max_mirror_budget

STEPS = """
import json, os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "config.json"), "w") as f:
        json.dump(config["data"], f)
"""
BUILD = """load("@marinbuild//rules:python.py", "python_step")

python_step(name = "read", fn = "mirror_steps:write", config = {{"data": {{"urls": [{value}]}}}})
"""


def session_of(root: Path):
    from marinbuild.analysis.session import Session

    session = Session.open(root)
    (label,) = session.load(["//a:read"])
    session.analyse([label])
    return session, label


def test_mirrored_reads_through_mirror_and_keeps_the_version(tmp_path: Path) -> None:
    plain = write_workspace(
        tmp_path / "plain", {"a/BUILD.marin": BUILD.format(value='"raw/dolma/v1.7"'), "mirror_steps.py": STEPS}
    )
    wrapped = BUILD.format(value='mirrored("raw/dolma/v1.7", budget_gb = 5)')
    root = write_workspace(tmp_path / "ws", {"a/BUILD.marin": wrapped, "mirror_steps.py": STEPS})
    session, label = session_of(root)
    (step,) = session.steps_of(label)
    assert max_mirror_budget(step.config) == 5
    plain_session, plain_label = session_of(plain)
    assert Path(session.output_paths_of(label)[0]).name == Path(plain_session.output_paths_of(plain_label)[0]).name

    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    env["PYTHONPATH"] = os.pathsep.join([str(root), *sys.path])
    built = subprocess.run([sys.executable, "-m", "marinbuild", "//a:read"], cwd=root, env=env, capture_output=True)
    assert built.returncode == 0, built.stderr
    (written,) = (root / "out/a").glob("read-*/config.json")
    assert json.loads(written.read_text()) == {"urls": ["mirror://raw/dolma/v1.7"]}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("mirrored(3)", "mirrored(): the path must be a string (not already mirror://), got 3"),
        ('mirrored("raw/x", budget_gb = 0)', "mirrored(): budget_gb must be a positive number of GB, got 0"),
    ],
)
def test_mirrored_errors_are_one_located_line(tmp_path: Path, value: str, message: str) -> None:
    root = write_workspace(tmp_path / "ws", {"a/BUILD.marin": BUILD.format(value=value)})
    assert_one_line_load_error(root, "//a:read", "a/BUILD.marin:3:83", message)
