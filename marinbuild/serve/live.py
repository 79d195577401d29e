"""Live updates: the events builds append to the workspace's event logs, as they are written.

``follow(folder, prefix)`` is an async generator of the records (each with its log's ``"run"`` id) that builds against
``prefix`` write after it starts: every ``INTERVAL`` seconds it reads what each log appended (complete lines only), and
yields ``None`` after ``KEEPALIVE`` quiet seconds so the server can notice a closed connection. Polling rather than
inotify, which is unreliable on NFS and overlays."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from marinbuild.serve.stopping import Stopping
from marinbuild.ui.event_log import list_logs, parse_lines

INTERVAL = 0.5
KEEPALIVE = 15.0


class _Tail:
    def __init__(self, folder: Path, prefix: str):
        self.folder, self.prefix = folder, prefix
        self.offsets: dict[Path, int] = {}
        self.wanted: dict[Path, bool] = {}
        for path in reversed(list_logs(self.folder)):
            self.offsets[path] = path.stat().st_size  # only what is written from now on

    def read_new(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for path in reversed(list_logs(self.folder)):
            offset = self.offsets.get(path, 0)
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size <= offset:
                continue
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(size - offset)
            end = data.rfind(b"\n") + 1  # complete lines only; the rest is read next time
            self.offsets[path] = offset + end
            if path not in self.wanted:
                self.wanted[path] = _header_prefix(path) == self.prefix
            if not self.wanted[path]:
                continue
            for record in parse_lines(data[:end].decode("utf-8", errors="replace")):
                if record.get("kind") == "run":
                    continue
                record["run"] = path.stem
                out.append(record)
        return out


def _header_prefix(path: Path) -> str | None:
    """The prefix a log's first line (its ``run`` header) names; None if it cannot be read."""
    try:
        with open(path, "rb") as f:
            records = parse_lines(f.readline().decode("utf-8", errors="replace"))
    except OSError:
        return None
    return records[0].get("prefix") if records and records[0].get("kind") == "run" else None


async def follow(
    folder: str | os.PathLike[str],
    prefix: str,
    interval: float = INTERVAL,
    keepalive: float = KEEPALIVE,
    stopping: Stopping | None = None,
) -> AsyncIterator[dict[str, Any] | None]:
    """Ends as soon as ``stopping`` is set (the server is shutting down)."""
    stopping = stopping or Stopping()
    tail = _Tail(Path(folder), prefix)
    quiet = 0.0
    while not stopping.is_set():
        records = await asyncio.to_thread(tail.read_new)
        for record in records:
            yield record
        if records:
            quiet = 0.0
        else:
            quiet += interval
            if quiet >= keepalive:
                quiet = 0.0
                yield None
        if await stopping.within(interval):
            return
