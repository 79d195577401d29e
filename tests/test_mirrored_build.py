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
from workspaces import CliWorkspace, assert_one_line_load_error, write_workspace

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


DATA_BUILD = """load("@marinbuild//rules:data.py", "raw_data")
load("@marinbuild//rules:download.py", "download")

raw_data(name = "docs", urls = [{docs}])
download(name = "copy", url = {copy})
"""


def _data_workspace(root: Path, docs: str, copy: str) -> CliWorkspace:
    write_workspace(root, {"a/BUILD.marin": DATA_BUILD.format(docs=docs, copy=copy)})
    return CliWorkspace(root)


def test_string_attributes_take_mirrored_paths_copied_home_once(tmp_path: Path) -> None:
    """``raw_data``'s ``urls`` and ``download``'s ``url`` take ``mirrored(...)``: the step copies the path from the
    region that has it into the build's prefix (a glob's folder whole) and reads it there; versions are the plain
    paths'; a budget too small fails the step in one line and copies nothing."""
    remote = tmp_path / "other-region"
    for name in ("a", "b"):
        (remote / "corpus" / "docs").mkdir(parents=True, exist_ok=True)
        (remote / "corpus" / "docs" / f"{name}.jsonl").write_text(json.dumps({"text": name}) + "\n")
    env = {"MARIN_MIRROR_PREFIXES": str(remote)}
    mirrored_ws = _data_workspace(
        tmp_path / "ws", 'mirrored("corpus/docs/*.jsonl", budget_gb = 1)', 'mirrored("corpus/docs", budget_gb = 1)'
    )
    mirrored_ws.extra_env = env
    build = mirrored_ws.build("//a:docs", "//a:copy")
    assert build.code == 0, build.stderr
    out = mirrored_ws.root / "out"
    assert sorted(p.name for p in (out / "corpus" / "docs").iterdir()) == ["a.jsonl", "b.jsonl"]  # copied home
    (docs,) = (out / "a").glob("docs-*")
    assert json.loads((docs / "manifest.json").read_text())["urls"] == [str(out / "corpus/docs/*.jsonl")]
    (copy,) = (out / "a").glob("copy-*")
    assert sorted(p.name for p in copy.glob("*.jsonl")) == ["a.jsonl", "b.jsonl"]

    plain = _data_workspace(tmp_path / "plain", '"corpus/docs/*.jsonl"', '"corpus/docs"')
    planned = plain.build("-n", "//a:docs", "//a:copy")
    assert planned.code == 0, planned.stderr
    plain_paths = {e["output_path"].rsplit("/", 1)[-1] for e in planned.events if e["kind"] == "planned"}
    assert plain_paths == {docs.name, copy.name}  # the version is the plain path's

    small = _data_workspace(tmp_path / "small", 'mirrored("corpus/docs/*.jsonl", budget_gb = 1e-9)', '"x"')
    small.extra_env = env
    failed = small.build("//a:docs")
    assert failed.code == 1 and "TransferBudgetExceeded" in failed.stderr, failed.stderr
    assert not (small.root / "out" / "corpus" / "docs" / "a.jsonl").exists()


def test_mirrored_is_refused_where_a_string_is_not_a_path(tmp_path: Path) -> None:
    refused = 'raw_data(name = "d", urls = ["z"], description = mirrored("x"))\n'
    root = write_workspace(tmp_path / "ws", {"a/BUILD.marin": DATA_BUILD.format(docs='"x"', copy='"y"') + refused})
    message = "attribute 'description' of raw_data(name='d'): takes no mirrored(...): it is not a path a step reads"
    assert_one_line_load_error(root, "//a:d", "a/BUILD.marin:6:36", message)
