"""Turning Starlark's errors into located ``BuildFileError``s (``path:line:col: message``).

Starlark reports an error as text: an optional traceback (``* path:line, in name``), a line
``error: message`` and ``--> path:line:col`` with a source snippet. A Python callable that
Starlark calls (a rule, ``glob()``, a ``load()``) cannot return its exception through
Starlark, so it records it here first (``remember``); ``from_starlark`` then prefers that
recorded error: already located (a ``BuildFileError``), or located at the call Starlark names.
"""

from __future__ import annotations

import re
import threading

from marinbuild.load.errors import BuildFileError, LocatedLater, Location

__all__ = ["forget", "from_starlark", "remember", "stack_frames"]

_pending = threading.local()
_FRAME = re.compile(r"^  \* (.+):(\d+), in ", re.MULTILINE)
_ARROW = re.compile(r"^ *--> (.+):(\d+):(\d+)\s*$", re.MULTILINE)
_ERROR = re.compile(r"^error: (.*)$", re.MULTILINE)


def remember(exc: BaseException) -> None:
    """Record the exception a Python callable raises into Starlark (the last one wins)."""
    _pending.exc = exc


def forget() -> None:
    _pending.exc = None


def stack_frames(text: str) -> list[tuple[str, int]]:
    """``(path, line)`` of each frame of a Starlark traceback or ``call_stack()`` text, outermost first."""
    return [(m.group(1), int(m.group(2))) for m in _FRAME.finditer(text)]


def _describe(exc: BaseException) -> str:
    if isinstance(exc, LocatedLater):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "value nested too deeply"
    return f"{type(exc).__name__}: {exc}"


def from_starlark(text: str, fallback: Location, cancelled: str | None = None) -> BuildFileError:
    """The ``BuildFileError`` for a Starlark error ``text`` (``fallback`` if it names no place).

    ``cancelled`` is the message for an evaluation stopped by its budget.
    """
    exc = getattr(_pending, "exc", None)
    _pending.exc = None
    if isinstance(exc, BuildFileError):
        return exc
    arrow = _ARROW.search(text)
    location = Location(arrow.group(1), int(arrow.group(2)), int(arrow.group(3))) if arrow else fallback
    if exc is not None:
        message = _describe(exc)
    else:
        found = _ERROR.search(text)
        message = found.group(1).strip() if found else text.strip().splitlines()[0]
        if cancelled is not None and message == "Evaluation cancelled":
            message = cancelled
    frames = stack_frames(text)
    callers = [f"{path}:{line}" for path, line in reversed(frames[:-1])]
    if frames and (frames[-1][0], frames[-1][1]) != (location.path, location.line):
        callers.insert(0, f"{frames[-1][0]}:{frames[-1][1]}")
    callers = [c for c in callers if c != f"{location.path}:{location.line}"]
    if callers:
        message += "; called from " + ", ".join(callers)
    return BuildFileError.at(location, message)
