"""The workspace's build event logs: every CLI build (not a dry run) records its run in one JSON-lines file.

``<workspace>/.marinbuild/events/<UTC time>-<pid>.jsonl``: a ``run`` line (``id``, ``patterns``, ``prefix``, ``argv``,
``pid``, ``time``), then a flushed line per event as ``--build_event_json_file`` writes it, so ``marinbuild serve`` can
tail it; a refused build ends with ``build_refused`` and its reason, a finished one with a ``compute`` event
(what it reused and spent; ``cache stats`` reads them). The log never fails a build: one that cannot be
written stops. ``planned``, ``cached`` and ``progress`` events are left out (a no-op writes four lines). The newest
``KEEP`` logs are kept; reading skips a cut-off last line."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.run import events as ev
from marinbuild.ui.bep import event_record

EVENTS_FOLDER = "events"
KEEP = 100
LEFT_OUT = frozenset({ev.PLANNED, ev.CACHED, ev.PROGRESS})
REFUSED = "build_refused"  # The last line of a refused build's log (not an event: no listener but the log hears of it).


def events_dir(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir) / EVENTS_FOLDER


class EventLog:
    """Listener writing a build's events to a new log under ``folder`` (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str], patterns: list[str], prefix: str):
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _prune(folder, KEEP - 1)
        now = time.time()
        self.id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + f"-{os.getpid()}"
        self.path = folder / f"{self.id}.jsonl"
        self._file = open(self.path, "a", encoding="utf-8")  # closed in close()
        self._lock = threading.Lock()
        self._write(
            {
                "kind": "run",
                "id": self.id,
                "patterns": list(patterns),
                "prefix": prefix,
                "argv": sys.argv[1:],
                "pid": os.getpid(),
                "time": now,
            }
        )

    def _write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, default=str)
        with self._lock:
            if self._file.closed:
                return
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except OSError:  # a full disk: the log stops, the build goes on
                with contextlib.suppress(OSError):
                    self._file.close()  # closes even when its last flush fails

    def __call__(self, event: ev.Event) -> None:
        if event.kind not in LEFT_OUT:
            self._write(event_record(event))

    def refused(self, reason: str) -> None:
        """End the log of a build refused before any step ran, with ``reason``'s first line."""
        lines = reason.strip().splitlines()
        self._write({"kind": REFUSED, "reason": lines[0] if lines else "", "time": time.time()})

    def close(self) -> None:
        with self._lock:
            self._file.close()


def open_event_log(cache_dir: str | os.PathLike[str], patterns: list[str], prefix: str) -> EventLog | None:
    """A new log in the workspace's ``.marinbuild`` (``cache_dir``); None if it cannot be created."""
    try:
        return EventLog(events_dir(cache_dir), patterns, prefix)
    except OSError:
        return None


def _prune(folder: Path, keep: int) -> None:
    logs = sorted(folder.glob("*.jsonl"))
    for old in logs[: max(0, len(logs) - keep)]:
        old.unlink(missing_ok=True)


@dataclass
class RunLog:
    """One build's log, read back: its header and events (oldest first)."""

    id: str
    path: str
    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def prefix(self) -> str | None:
        return self.header.get("prefix")

    def summary(self) -> dict[str, Any]:
        """When, what was asked, ran and failed; ``finished``: False while running or dead; ``refused``: why."""

        def steps(kind: str) -> list[Any]:
            return [e.get("step") for e in self.events if e.get("kind") == kind]

        end = next((e for e in reversed(self.events) if e.get("kind") in (ev.BUILD_FINISHED, REFUSED)), None)
        used = next((e for e in self.events if e.get("kind") == ev.COMPUTE), None)
        return {
            "id": self.id,
            "time": self.header.get("time"),
            "patterns": self.header.get("patterns", []),
            "argv": self.header.get("argv", []),
            "prefix": self.prefix,
            "finished": end is not None,
            "end_time": end.get("time") if end else None,
            "ran": steps(ev.SUCCEEDED),
            "failed": steps(ev.FAILED),
            "dep_failed": steps(ev.DEP_FAILED),
            "refused": end.get("reason") if end is not None and end.get("kind") == REFUSED else None,
            "compute": None if used is None else {**used["data"], "steps": None, "text": used.get("detail")},
        }


def list_logs(folder: str | os.PathLike[str]) -> list[Path]:
    """The event logs under ``folder``, newest first (their names sort by time)."""
    folder = Path(folder)
    return sorted(folder.glob("*.jsonl"), reverse=True) if folder.is_dir() else []


def logs_for(cache_dir: str | os.PathLike[str], prefix: str) -> list[RunLog]:
    """The readable logs of the builds against ``prefix`` in the workspace whose ``.marinbuild`` is ``cache_dir``,
    newest first."""
    logs = (read_log(path) for path in list_logs(events_dir(cache_dir)))
    return [log for log in logs if log is not None and log.prefix == prefix]


def read_log(path: str | os.PathLike[str]) -> RunLog | None:
    """The log at ``path``; None if it has no readable header line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    records = parse_lines(text)
    if not records or records[0].get("kind") != "run":
        return None
    return RunLog(path.stem, str(path), records[0], records[1:])


def parse_lines(text: str) -> list[dict[str, Any]]:
    """The JSON objects of complete lines of ``text``; a line that does not parse (cut off) is skipped."""
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out
