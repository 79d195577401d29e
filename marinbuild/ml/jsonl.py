"""JSON-lines files of records (metrics, run starts), local or on any fsspec filesystem; no heavy imports."""

from __future__ import annotations

import json
import os
from typing import Any

import fsspec


def read_records(path: str) -> list[dict[str, Any]]:
    """The records of a JSON-lines file (empty if it does not exist)."""
    try:
        with fsspec.open(path, "r") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def append_record(path: str, record: dict[str, Any]) -> None:
    """Add one record (object stores have no append: the file is rewritten; these files are small)."""
    fs, p = fsspec.core.url_to_fs(path)
    fs.makedirs(os.path.dirname(p), exist_ok=True)
    old = fs.cat_file(p).decode() if fs.exists(p) else ""
    with fs.open(p, "w") as f:
        f.write(old + json.dumps(record) + "\n")
