"""Turning Starlark's errors into located ``BuildFileError``s (``path:line:col: message``).

Starlark reports errors as text. A Python callable cannot return its exception through Starlark, so it records it here
first (``remember``), and ``from_starlark`` prefers it. Frames of generated code (``<...>``) are never shown: the error
is placed at the BUILD or ``.star`` line that made the call. Starlark's wording is kept, with a hint for Python habits
(``import``, ``while``, f-strings...)."""

from __future__ import annotations

import os
import re
import threading

from marinbuild.load.errors import BuildFileError, LocatedLater, Location
from marinbuild.load.locate import call_location

_pending = threading.local()
_FRAME = re.compile(r"^  \* (.+):(\d+), in ", re.MULTILINE)
_NAMED_FRAME = re.compile(r"^  \* (.+):(\d+), in (\S+)", re.MULTILINE)
_ARROW = re.compile(r"^ *--> (.+):(\d+):(\d+)\s*$", re.MULTILINE)
_ERROR = re.compile(r"^error: (.*)$", re.MULTILINE)
_GENERATED = "<"
_MAX_CALLERS = 3

_KEYWORD_HINTS = {
    "import": "load() symbols from a .star file or a rules module instead; code that needs Python belongs in rules/",
    "from": "load() symbols from a .star file or a rules module instead",
    "while": "loading must terminate: iterate with 'for x in range(n)'",
    "class": "use struct() or a dict; classes belong in a rules/ module",
    "try": "call fail() to stop with an error; there are no exceptions to catch",
    "except": "call fail() to stop with an error; there are no exceptions to catch",
    "raise": "call fail(message) instead",
    "assert": "write 'if not cond: fail(message)' instead",
    "global": "return values from functions instead",
    "nonlocal": "return values from functions instead",
    "del": "make a new value instead (or dict.pop(key))",
    "yield": "return a list instead",
}
_RESERVED = re.compile(r"Parse error: cannot use reserved keyword `(\w+)`")
_SERDE = re.compile(r"Operation `serde::serialize` not supported on type `([^`]+)`")
_UNKNOWN = re.compile(r"Variable `([^`]+)` not found(, did you mean `([^`]+)`\?)?")


def remember(exc: BaseException) -> None:
    """Record the exception a Python callable raises into Starlark (the last one wins)."""
    _pending.exc = exc


def forget() -> None:
    _pending.exc = None


def stack_frames(text: str) -> list[tuple[str, int]]:
    """``(path, line)`` of each frame of a Starlark traceback or ``call_stack()`` text, outermost first."""
    return [(m.group(1), int(m.group(2))) for m in _FRAME.finditer(text)]


def source_path(root: str, display: str) -> str:
    """The file a displayed path names (displayed paths are workspace-relative when inside it)."""
    return display if os.path.isabs(display) else os.path.join(root, display)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, LocatedLater):
        return str(exc)
    return "value nested too deeply" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {exc}"


def _reword(message: str) -> str:
    """Starlark's ``message`` with marinbuild's hint where a Python habit is the likely cause."""
    reserved = _RESERVED.match(message)
    if reserved is not None:
        word = reserved.group(1)
        return f"syntax error: '{word}' is not Starlark: {_KEYWORD_HINTS.get(word, 'not Starlark')}"
    if message.startswith("Parse error: "):
        return "syntax error: " + message[len("Parse error: ") :]
    if "must enable f-strings" in message:
        return 'syntax error: f-strings are not Starlark: write "%s" % value or "{}".format(value)'
    unknown = _UNKNOWN.match(message)
    if unknown is not None:
        hint = f" (did you mean '{unknown.group(3)}'?)" if unknown.group(3) else ""
        return (
            f"unknown name '{unknown.group(1)}': it is not a builtin, not defined in this file and not load()ed{hint}"
        )
    if message == "Immutable":
        return (
            "cannot modify a frozen value (a loaded file's values are frozen once it is loaded): "
            "make a copy first with list(value), dict(value) or value + [...]"
        )
    serde = _SERDE.search(message)
    if serde is not None:
        return (
            "only plain values (strings, numbers, booleans, None, lists, tuples, dicts, structs) can be given "
            f"to a rule or a builtin, not a {serde.group(1)}"
        )
    if message == "Starlark call stack overflow":
        return "calls nested too deeply (a function calling itself without end?): the call stack limit was reached"
    return message


def from_starlark(text: str, fallback: Location, root: str, cancelled: str | None = None) -> BuildFileError:
    """The ``BuildFileError`` for Starlark error ``text`` (at ``fallback`` if placeless; ``cancelled``: a budget's)."""
    exc = getattr(_pending, "exc", None)
    _pending.exc = None
    if isinstance(exc, BuildFileError):
        return exc
    named = [(m.group(1), int(m.group(2)), m.group(3)) for m in _NAMED_FRAME.finditer(text)]
    # each frame of the file's own code, with the function it called (the next frame's name): that call's column
    frames = [
        (path, line, named[i + 1][2] if i + 1 < len(named) else None)
        for i, (path, line, _name) in enumerate(named)
        if not path.startswith(_GENERATED)
    ]
    arrow = _ARROW.search(text)
    if arrow is not None and not arrow.group(1).startswith(_GENERATED):
        location = Location(arrow.group(1), int(arrow.group(2)), int(arrow.group(3)))
    elif frames:
        path, line, callee = frames.pop()
        location = call_location(path, source_path(root, path), line, callee)
    else:
        location = fallback
    if exc is not None:
        message = _describe(exc)
    else:
        found = _ERROR.search(text)
        message = found.group(1).strip() if found else (text.strip().splitlines() or ["error"])[0]
        message = cancelled if cancelled is not None and message == "Evaluation cancelled" else _reword(message)
    if frames and frames[-1][:2] == (location.path, location.line):
        frames.pop()
    if frames:
        shown = [str(call_location(p, source_path(root, p), n, c)) for p, n, c in reversed(frames[-_MAX_CALLERS:])]
        more = len(frames) - len(shown)
        message += "; called from " + ", ".join(shown) + (f" and {more} more" if more else "")
    return BuildFileError.at(location, message)
