"""Events: every transition of a build is an event; displays, logs and traces are listeners.

The engine never prints. It calls ``EventBus.emit``; listeners decide what to show.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from enum import StrEnum
from typing import Any, Protocol

from marinbuild.run.failure import traceback_file_of

logger = logging.getLogger("marinbuild")


class EventKind(StrEnum):
    """What an event reports, in the order a step can go through them. A ``StrEnum``: the value is what the
    build-event file, ``--output json`` and the trace carry."""

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


class Event:
    """One transition: what happened (``kind``), to which step, when and on which thread.

    A plain class with slots, not a dataclass: a no-op build of 10,000 steps makes 10,000 of them.
    """

    __slots__ = ("kind", "step", "output_path", "detail", "error", "time", "thread", "data")

    def __init__(
        self,
        kind: EventKind,
        step: str | None = None,
        output_path: str | None = None,
        detail: str | None = None,
        error: BaseException | None = None,
        time: float | None = None,
        thread: int | None = None,
        data: dict[str, Any] | None = None,
    ):
        self.kind = kind
        self.step = step
        self.output_path = output_path
        self.detail = detail
        self.error = error
        self.time = _now() if time is None else time
        self.thread = _thread_id() if thread is None else thread
        self.data = {} if data is None else data

    def __repr__(self) -> str:
        return f"Event({str(self.kind)!r}, step={self.step!r}, detail={self.detail!r})"


_now = time.time
_thread_id = threading.get_ident


Listener = Callable[[Event], None]


class ManyListener(Protocol):
    """A listener that also takes many steps planned alike in one call (``EventBus.emit_planned``)."""

    def __call__(self, event: Event) -> None: ...

    def planned_many(self, steps: Sequence[tuple[str, str]], state: str, data: dict[str, Any]) -> None: ...


class EventBus:
    """Fans events out to listeners; safe to emit from any thread."""

    def __init__(self, listeners: list[Listener] | None = None):
        self._listeners: list[Listener] = list(listeners or [])
        self._lock = threading.Lock()

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def emit(self, kind: EventKind, **fields: Any) -> Event:
        event = Event(kind, **fields)
        with self._lock:
            for listener in self._listeners:
                listener(event)
        return event

    def emit_planned(self, steps: Sequence[tuple[str, str]], state: str, data: dict[str, Any]) -> None:
        """A PLANNED event of ``state`` for each (name, output path) of ``steps``, each with ``data``. A listener
        with a ``planned_many(steps, state, data)`` method (a ``ManyListener``) takes them in one call; the others
        get one event each. A no-op plans every step of the graph as built: one call instead of one event per step
        (``bench/run.py``'s no-op rows)."""
        with self._lock:
            events: list[Event] | None = None
            for listener in self._listeners:
                many = getattr(listener, "planned_many", None)
                if many is not None:
                    many(steps, state, data)
                    continue
                if events is None:
                    events = [Event(PLANNED, name, path, state, data=data) for name, path in steps]
                for event in events:
                    listener(event)


def emit_plan(bus: EventBus, steps: Iterable[tuple[str, str, str, str | None]], dry_run: bool) -> None:
    """A PLANNED event for each (name, output path, state, status) of ``steps``, in order: consecutive steps of one
    state and status go out together (``EventBus.emit_planned``), with ``{"dry_run", "status"}`` as their data."""
    for (state, status), run in itertools.groupby(steps, key=lambda step: (step[2], step[3])):
        named = [(name, path) for name, path, _state, _status in run]
        bus.emit_planned(named, state, {"dry_run": dry_run, "status": status})


def _log(level: int, msg: str, *args: Any) -> None:
    """``logger.log(level, msg, *args)`` without the caller lookup (a stack walk per line, and the caller is
    always this module): a 10,000-step build logs 20,000 lines."""
    if logger.isEnabledFor(level):
        logger.handle(logger.makeRecord(logger.name, level, __file__, 0, msg, args, None, "log_listener"))


def log_listener(event: Event) -> None:
    """The default listener of the Python API: one log line per interesting event."""
    kind = event.kind
    if kind == STARTED:
        _log(logging.INFO, "running %s -> %s", event.step, event.output_path)
    elif kind == SUCCEEDED:
        _log(logging.INFO, "built %s", event.step)
    elif kind == WAITING:
        _log(logging.INFO, "waiting for %s: %s", event.step, event.detail)
    elif kind == FAILED:
        path = traceback_file_of(event.error)
        if path is not None:
            _log(logging.ERROR, "FAILED %s: %s (full traceback: %s)", event.step, event.error, path)
        else:
            _log(logging.ERROR, "FAILED %s: %s", event.step, event.error)
    elif kind == DEP_FAILED:
        _log(logging.WARNING, "not running %s: %s", event.step, event.detail)
    elif kind == PLANNED and event.data.get("dry_run"):
        _log(logging.INFO, "[dry run] %s: %s (%s)", event.step, event.detail, event.output_path)
    else:
        _log(logging.DEBUG, "%s %s %s", kind, event.step or "", event.detail or "")


class LogFormatter(logging.Formatter):
    """A ``logging.Formatter`` that turns a record's time into text once per second, not once per line."""

    def __init__(self, fmt: str | None = None) -> None:
        super().__init__(fmt)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 (logging's name)
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        second, text = self._second  # one tuple: threads never see a second with another second's text
        if int(record.created) != second:
            second = int(record.created)
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = (second, text)
        return (self.default_msec_format or "%s,%03d") % (text, record.msecs)
