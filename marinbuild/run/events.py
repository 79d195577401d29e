"""Events: every transition of a build is an event; displays, logs and traces are listeners.

The engine never prints. It calls ``EventBus.emit``; listeners decide what to show.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("marinbuild")

# Event kinds, in the order a step can go through them.
PLANNED = "planned"  # the plan decided the step's state (detail: the state)
WAITING = "waiting"  # another runner holds the lease; waiting for its result
STARTED = "started"  # this runner holds the lease and runs the step
SUCCEEDED = "succeeded"
CACHED = "cached"  # already built (or built by another runner while we waited)
FAILED = "failed"
DEP_FAILED = "dep_failed"  # not run because a dependency failed
SKIPPED = "skipped"  # not run because the build stopped scheduling after a failure
BUILD_STARTED = "build_started"
BUILD_FINISHED = "build_finished"


class Event:
    """One transition: what happened (``kind``), to which step, when and on which thread.

    A plain class with slots, not a dataclass: a no-op build of 10,000 steps makes 10,000 of them.
    """

    __slots__ = ("kind", "step", "output_path", "detail", "error", "time", "thread", "data")

    def __init__(self, kind: str, step: str | None = None, output_path: str | None = None, detail: str | None = None,
                 error: BaseException | None = None, time: float | None = None, thread: int | None = None,
                 data: dict[str, Any] | None = None):
        self.kind = kind
        self.step = step
        self.output_path = output_path
        self.detail = detail
        self.error = error
        self.time = _now() if time is None else time
        self.thread = _thread_id() if thread is None else thread
        self.data = {} if data is None else data

    def __repr__(self) -> str:
        return f"Event({self.kind!r}, step={self.step!r}, detail={self.detail!r})"


_now = time.time
_thread_id = threading.get_ident


Listener = Callable[[Event], None]


class EventBus:
    """Fans events out to listeners; safe to emit from any thread."""

    def __init__(self, listeners: list[Listener] | None = None):
        self._listeners: list[Listener] = list(listeners or [])
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, kind: str, **fields: Any) -> Event:
        event = Event(kind, **fields)
        with self._lock:
            for listener in self._listeners:
                listener(event)
        return event


def log_listener(event: Event) -> None:
    """The default listener of the Python API: one log line per interesting event."""
    if event.kind == STARTED:
        logger.info("running %s -> %s", event.step, event.output_path)
    elif event.kind == SUCCEEDED:
        logger.info("built %s", event.step)
    elif event.kind == WAITING:
        logger.info("waiting for %s: %s", event.step, event.detail)
    elif event.kind == FAILED:
        logger.error("FAILED %s: %s", event.step, event.error)
    elif event.kind == DEP_FAILED:
        logger.warning("not running %s: %s", event.step, event.detail)
    elif event.kind == PLANNED and event.data.get("dry_run"):
        logger.info("[dry run] %s: %s (%s)", event.step, event.detail, event.output_path)
    else:
        logger.debug("%s %s %s", event.kind, event.step or "", event.detail or "")
