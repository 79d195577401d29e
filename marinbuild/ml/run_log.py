"""A JSON-lines log of one step's work items, one line per item per attempt, kept across attempts.

``RunLog(path)`` reads earlier attempts' lines; ``add(record)`` appends one tagged with this attempt's ``run`` id,
written out at most every second and on ``flush()`` by rewriting the file (one object-store write: for thousands of
lines, not millions); ``jsonl.read_records`` reads it. ``tokenize`` logs its shards here, ``download`` its files."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from typing import Any

import fsspec


class RunLog:
    def __init__(self, path: str):
        self.path = path
        self.run = uuid.uuid4().hex[:12]
        self.lines: list[str] = []
        self.flushed = 0.0
        fs, p = fsspec.core.url_to_fs(self.path)
        self.old = fs.cat_file(p).decode() if fs.exists(p) else ""

    def add(self, record: dict[str, Any]) -> None:
        self.lines.append(json.dumps({"run": self.run, **record}))
        if time.time() - self.flushed > 1.0:
            self.flush()

    def flush(self) -> None:
        self.flushed = time.time()
        fs, p = fsspec.core.url_to_fs(self.path)
        fs.makedirs(os.path.dirname(p), exist_ok=True)
        with fs.open(p, "w") as f:
            f.write(self.old + "".join(line + "\n" for line in self.lines))


def node_name() -> str:
    """Where a work item runs, for its log line: the Ray node id in a Ray task, else the host name."""
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return str(ray.get_runtime_context().get_node_id())
    return socket.gethostname()
