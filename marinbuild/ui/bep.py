"""Build events as JSON lines, after Bazel's ``--build_event_json_file``: ``BuildEventJsonWriter(path)`` writes one
flushed line per event (``kind``, ``step``, ``output_path``, ``detail``, ``time``, ``error``, ``traceback``,
``traceback_file``, ``data``; docs/cli.md), so the file can be tailed during the build."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from marinbuild.run import events as ev
from marinbuild.run.failure import traceback_file_of, traceback_text
from marinbuild.ui._text import error_text


def event_record(event: ev.Event) -> dict[str, Any]:
    error = event.error
    return {
        "kind": event.kind,
        "step": event.step,
        "output_path": event.output_path,
        "detail": event.detail,
        "time": event.time,
        "error": error_text(error),
        "traceback": traceback_text(error) if error is not None else None,
        "traceback_file": traceback_file_of(error),
        "data": event.data,
    }


class BuildEventJsonWriter:
    """Listener writing every event as one JSON line to ``path`` (truncated first; parent folders made)."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")  # closed in close()
        self._lock = threading.Lock()

    def __call__(self, event: ev.Event) -> None:
        line = json.dumps(event_record(event), default=str)
        with self._lock:
            if self._file.closed:
                return
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()
