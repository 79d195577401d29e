"""The run info's streamed text and name, byte for byte, however its steps come in pieces.

``store/run_info.py`` hashes the steps' pieces with one separator (Marin's ``json.dumps`` of the list) and writes
them with another (one step a line): the file and its name are checked here against a plain composition with the
standard library's ``json`` and ``hashlib``.
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


@pytest.mark.parametrize(("count", "cut"), [(0, 7), (1, 7), (300, 7), (300, 1000), (3000, 13)])
def test_the_streamed_run_info_is_the_plain_composition(tmp_path: Path, count: int, cut: int) -> None:
    """Small cuts make steps of hundreds of pieces."""
    steps = _steps(count)
    path = run_info.write(str(tmp_path), "exp", HEAD, (_pieces(step, cut) for step in steps), only_if_new=False)
    text, name = _expected(steps)
    assert os.path.basename(path) == name
    assert Path(path).read_bytes() == text
    assert os.listdir(tmp_path) == [name]
    assert json.loads(text) == {**HEAD, "steps": steps}
