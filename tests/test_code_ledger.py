"""The code-record ledger through the real CLI in a subprocess: a check reads only the code records that changed
since the last check (``marinbuild.code_digest_ledger``), and still sees every change of the code itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import age_workspace, write_workspace

STEPS = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(config["name"])
"""

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "loose", fn = "ledger_steps:write", config = {"name": "loose"}, code_in_key = False)
"""

SENTENCE = "code changed since this output was built: "


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return write_workspace(tmp_path / "ws", {"ledger_steps.py": STEPS, "pipe/BUILD.marin": BUILD})


def mb(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=120
    )


def status(ws: Path) -> str:
    done = mb(ws, "cache", "status", "//pipe:loose")
    assert done.returncode == 0, done.stderr
    return done.stdout


def record_of(ws: Path) -> Path:
    (record,) = (ws / "out").rglob(".marinbuild_code.json")
    return record


def test_an_unchanged_record_is_answered_from_the_ledger(ws: Path) -> None:
    """Observed by a record rewritten in place with its signature (mtime, size, inode) kept: the check does not
    read it again; once its signature changes, it is read and its (now different) content reported."""
    assert mb(ws, "//pipe:loose").returncode == 0
    age_workspace(ws)  # records older than the racy window: their signatures can be trusted
    assert SENTENCE not in status(ws)  # reads the record, fills the ledger
    record = record_of(ws)
    st = record.stat()
    files = json.loads(record.read_text())["files"]
    digest = files["ledger_steps.py"]
    files["ledger_steps.py"] = ("0" if digest[0] != "0" else "1") + digest[1:]  # same length: same size
    with open(record, "r+") as f:  # in place: same inode
        f.write(json.dumps({"files": files}, sort_keys=True))
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert record.stat().st_size == st.st_size and record.stat().st_ino == st.st_ino
    assert SENTENCE not in status(ws)  # the ledger answered: the record was not read
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns - 1_000_000_000))
    assert SENTENCE + "ledger_steps.py" in status(ws)  # a new signature: read again


def test_a_code_edit_is_seen_through_the_ledger(ws: Path) -> None:
    assert mb(ws, "//pipe:loose").returncode == 0
    age_workspace(ws)
    assert SENTENCE not in status(ws)
    assert (ws / ".marinbuild" / "code_records.bin").is_file()
    (ws / "ledger_steps.py").write_text(STEPS + "\n# an edit\n")
    assert SENTENCE + "ledger_steps.py" in status(ws)
    build = mb(ws, "//pipe:loose")
    assert build.returncode == 0 and "warning: code changed" in build.stderr


def test_a_rebuilt_output_is_read_again(ws: Path) -> None:
    """A record rewritten by a run (a new file) is read again, so the warning goes once the step reran."""
    assert mb(ws, "//pipe:loose").returncode == 0
    age_workspace(ws)
    (ws / "ledger_steps.py").write_text(STEPS + "\n# an edit\n")
    assert SENTENCE + "ledger_steps.py" in status(ws)
    assert mb(ws, "--rebuild", "//pipe:loose", "//pipe:loose").returncode == 0
    assert SENTENCE not in status(ws)
    age_workspace(ws)
    assert SENTENCE not in status(ws)


@pytest.mark.parametrize("damage", ["cut short", "a flipped byte"])
def test_a_damaged_ledger_is_read_as_empty(ws: Path, damage: str) -> None:
    """A record rewritten in place with its signature kept, which an intact ledger would answer from memory: with
    the ledger file damaged, the record is read again and its content reported."""
    assert mb(ws, "//pipe:loose").returncode == 0
    age_workspace(ws)
    assert SENTENCE not in status(ws)  # fills the ledger
    record = record_of(ws)
    st = record.stat()
    files = json.loads(record.read_text())["files"]
    digest = files["ledger_steps.py"]
    files["ledger_steps.py"] = ("0" if digest[0] != "0" else "1") + digest[1:]
    with open(record, "r+") as f:
        f.write(json.dumps({"files": files}, sort_keys=True))
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns))
    ledger = ws / ".marinbuild" / "code_records.bin"
    data = bytearray(ledger.read_bytes())
    if damage == "cut short":
        del data[-3:]
    else:
        data[len(data) // 2] ^= 0x01
    ledger.write_bytes(bytes(data))
    assert SENTENCE + "ledger_steps.py" in status(ws)
