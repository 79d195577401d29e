"""The run info's streamed text, byte for byte, whatever the batches the writer cuts it into.

``store/run_info.py`` composes on one thread and hashes and writes batches on another, with different separators
in the hashed list (Marin's ``json.dumps`` of the steps) and in the file (one step a line): the file and its name
are checked here against a plain composition with the standard library's ``json`` and ``hashlib``.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from marinbuild.store import run_info

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


@pytest.mark.parametrize(
    ("count", "batch_bytes", "cut"), [(0, 64, 7), (1, 64, 7), (300, 64, 7), (300, 5000, 1000), (300, 1 << 22, 13)]
)
def test_the_streamed_run_info_is_the_plain_composition(tmp_path: Path, count: int, batch_bytes: int, cut: int) -> None:
    steps = _steps(count)
    path = tmp_path / "info.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        md5 = run_info._stream(fd, HEAD, (_pieces(step, cut) for step in steps), batch_bytes=batch_bytes)
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


def test_a_writer_that_cannot_write_raises_and_leaves_no_thread(tmp_path: Path) -> None:
    """The sink fails on its first batch (a read-only descriptor) while the composer still has batches to hand it:
    the composer gets the error instead of waiting on a dead thread."""
    import threading

    path = tmp_path / "info.json"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            run_info._stream(fd, HEAD, (_pieces(step, 64) for step in _steps(2000)), batch_bytes=256)
    finally:
        os.close(fd)
    assert not [t for t in threading.enumerate() if t.name == "marinbuild-run-info-sink"]
