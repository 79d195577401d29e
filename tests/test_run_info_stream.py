"""The run info's streamed text, byte for byte, however its steps come in pieces; a short write is never silent.

``store/run_info.py`` hashes the steps' pieces with one separator (Marin's ``json.dumps`` of the list) and writes
them with another (one step a line) through ``writev``, many pieces a call: the file and its name are checked here
against a plain composition with the standard library's ``json`` and ``hashlib``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from marinbuild.store import run_info

REPO = Path(__file__).resolve().parent.parent

HEAD = {
    "worker_id": "w-1",
    "git_commit": None,
    "caller_path": "/x/exp.py",
    "created_date": "2026-01-02T03:04:05.000006",
    "user": "u",
    "prefix": "/p",
}


def _steps(count: int) -> list[dict[str, object]]:
    """Steps of very different sizes: some far bigger than a small batch, some tiny."""
    return [
        {"name": f"s{i}", "version": {"blob": "v" * (i * 37 % 900), "i": i}, "deps": [f"/p/s{i - 1}"]}
        for i in range(count)
    ]


def _pieces(step: dict[str, object], cut: int) -> tuple[bytes, ...]:
    """The step's compact sorted JSON, cut into pieces every ``cut`` bytes (as versions come in pieces)."""
    text = json.dumps(step, sort_keys=True).encode()
    return tuple(text[i : i + cut] for i in range(0, len(text), cut))


def _expected(steps: list[dict[str, object]]) -> tuple[bytes, str]:
    head = json.dumps(HEAD, indent=2)[:-2] + ',\n  "steps": [\n'
    body = ",\n".join("    " + json.dumps(step, sort_keys=True) for step in steps)
    text = (head + body + "\n  ]\n}\n").encode()
    name = "exp-" + hashlib.md5(json.dumps(steps, sort_keys=True).encode()).hexdigest()[:6] + ".json"
    return text, name


@pytest.mark.parametrize(("count", "cut"), [(0, 7), (1, 7), (300, 7), (300, 1000), (3000, 13)])
def test_the_streamed_run_info_is_the_plain_composition(tmp_path: Path, count: int, cut: int) -> None:
    """Small cuts make steps of hundreds of pieces and thousands of pieces in all: many ``writev`` calls."""
    steps = _steps(count)
    path = tmp_path / "info.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        md5 = run_info._stream(fd, HEAD, (_pieces(step, cut) for step in steps))
    finally:
        os.close(fd)
    text, name = _expected(steps)
    assert path.read_bytes() == text
    assert f"exp-{md5[:6]}.json" == name
    assert json.loads(text) == {**HEAD, "steps": steps}


def test_write_names_the_file_as_marin_does_and_leaves_no_temporary(tmp_path: Path) -> None:
    steps = _steps(50)
    path = run_info.write(str(tmp_path), "exp", HEAD, (_pieces(step, 11) for step in steps), only_if_new=False)
    text, name = _expected(steps)
    assert os.path.basename(path) == name
    assert Path(path).read_bytes() == text
    assert os.listdir(tmp_path) == [name]


SHORT_WRITE = textwrap.dedent("""
    import resource, signal, sys
    from marinbuild.store import run_info

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit: a short write, then EFBIG (no signal death)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
    with open(sys.argv[1], "wb") as f:
        try:
            run_info._write_all(f.fileno(), [b"a" * 600, b"b" * 600, b"c" * 600])
        except OSError as exc:
            print(exc.errno)
""")


def test_a_short_write_goes_on_and_fails_rather_than_dropping_text(tmp_path: Path) -> None:
    """A file size limit cuts ``writev`` short at 1,000 bytes: the writer resumes there and gets the error."""
    path = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", SHORT_WRITE, str(path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(errno.EFBIG)
    assert path.read_bytes() == b"a" * 600 + b"b" * 400
