"""Events: every transition of a build is one. The engine never prints: listeners (displays, logs, traces)
decide what to show of what ``EventBus.emit`` sends them."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from marinbuild.run.failure import traceback_file_of

logger = logging.getLogger("marinbuild")


class EventKind(StrEnum):
    """What an event reports, in the order a step can go through them; the value is what files and JSON carry."""

    PLANNED = "planned"  # the plan decided the step's state (detail: the state)
    WAITING = "waiting"  # another runner holds the lease; waiting for its result
    STARTED = "started"  # this runner holds the lease and runs the step
    PROGRESS = "progress"  # a running step reports its progress (detail: the text to show, data: the numbers)
    SUCCEEDED = "succeeded"
    CACHED = "cached"  # already built (or built by another runner while we waited)
    FAILED = "failed"
    DEP_FAILED = "dep_failed"  # not run because a dependency failed
    SKIPPED = "skipped"  # not run because the build stopped scheduling after a failure
    BUILD_STARTED = "build_started"
    BUILD_FINISHED = "build_finished"
    COMPUTE = "compute"  # after a build: what it reused and spent (detail: in words, data: ``run/compute.py``'s)


# The kinds under the names listeners import (``ev.SUCCEEDED``).
PLANNED = EventKind.PLANNED
WAITING = EventKind.WAITING
STARTED = EventKind.STARTED
PROGRESS = EventKind.PROGRESS
SUCCEEDED = EventKind.SUCCEEDED
CACHED = EventKind.CACHED
FAILED = EventKind.FAILED
DEP_FAILED = EventKind.DEP_FAILED
SKIPPED = EventKind.SKIPPED
BUILD_STARTED = EventKind.BUILD_STARTED
BUILD_FINISHED = EventKind.BUILD_FINISHED
COMPUTE = EventKind.COMPUTE


@dataclass(slots=True, repr=False, eq=False)
class Event:
    """One transition: what happened (``kind``), to which step, when and on which thread."""

    kind: EventKind
    step: str | None = None
    output_path: str | None = None
    detail: str | None = None
    error: BaseException | None = None
    time: float = field(default_factory=time.time)
    thread: int = field(default_factory=threading.get_ident)
    data: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Event({str(self.kind)!r}, step={self.step!r}, detail={self.detail!r})"


Listener = Callable[[Event], None]


class EventBus:
    """Fans events out to listeners; safe to emit from any thread."""

    def __init__(self, listeners: list[Listener] | None = None):
        self._listeners: list[Listener] = list(listeners or [])
        self._lock = threading.Lock()

    def emit(self, kind: EventKind, **fields: Any) -> Event:
        event = Event(kind, **fields)
        with self._lock:
            for listener in self._listeners:
                listener(event)
        return event


def emit_plan(bus: EventBus, steps: Iterable[tuple[str, str, str, str | None]], dry_run: bool) -> None:
    """A PLANNED event for each (name, output path, state, status) of ``steps``, in order."""
    for name, path, state, status in steps:
        bus.emit(PLANNED, step=name, output_path=path, detail=state, data={"dry_run": dry_run, "status": status})


def log_listener(event: Event) -> None:
    """The default listener of the Python API: one log line per interesting event."""
    kind = event.kind
    if kind == STARTED:
        logger.log(logging.INFO, "running %s -> %s", event.step, event.output_path)
    elif kind == SUCCEEDED:
        logger.log(logging.INFO, "built %s", event.step)
    elif kind == WAITING:
        logger.log(logging.INFO, "waiting for %s: %s", event.step, event.detail)
    elif kind == FAILED:
        path = traceback_file_of(event.error)
        more = f" (full traceback: {path})" if path is not None else ""
        logger.log(logging.ERROR, "FAILED %s: %s%s", event.step, event.error, more)
    elif kind == DEP_FAILED:
        logger.log(logging.WARNING, "not running %s: %s", event.step, event.detail)
    elif kind == PLANNED and event.data.get("dry_run"):
        logger.log(logging.INFO, "[dry run] %s: %s (%s)", event.step, event.detail, event.output_path)
    else:
        logger.log(logging.DEBUG, "%s %s %s", kind, event.step or "", event.detail or "")
