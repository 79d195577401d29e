"""The package being evaluated (per thread) and call-site locations taken from Python frames.

Rule calls, ``glob()``, ``package_name()`` and ``fail()`` find the BUILD file they were
called from here. A call's location is the innermost frame running dialect code (a
BUILD file or a loaded ``.bzl``-style file), or, for rule calls, the BUILD file itself;
its column comes from the code object's position table (exact, even with several calls
on one line).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Any

from marinbuild.load.errors import BuildFileError, Location

if TYPE_CHECKING:
    from marinbuild.core.labels import Label
    from marinbuild.load.target import Target

__all__ = [
    "PackageContext",
    "code_location",
    "code_position",
    "current_package",
    "dialect_files",
    "frame_location",
    "frame_site",
    "package_scope",
    "register_dialect_file",
    "site_location",
]


@dataclass
class PackageContext:
    """State of one BUILD file evaluation: where it is and the targets it has declared so far."""

    package: str
    package_dir: Path
    build_file: str  # code filename of the BUILD file (absolute path)
    display: str  # the BUILD file's path in messages
    targets: dict[str, Target] = field(default_factory=dict)
    glob_files: list[str] | None = None  # the package's files (lazily listed by glob())
    labels: dict[str, Label] = field(default_factory=dict)  # label texts converted here (see attrs.labels_of)
    label_prefix: str | None = ""  # "//package:" if that spells labels (attrs.absolute_prefix); "": not known yet


_state = threading.local()
_DIALECT_FILES: dict[str, str] = {}  # code filename -> display path
_POSITIONS: dict[int, tuple[CodeType, list[tuple[int | None, int | None, int | None, int | None]]]] = {}


def register_dialect_file(filename: str, display: str) -> None:
    """Record that code compiled with ``filename`` is dialect code shown as ``display`` in messages."""
    _DIALECT_FILES[filename] = display


def dialect_files() -> dict[str, str]:
    return _DIALECT_FILES


def current_package(what: str | Callable[[], str]) -> PackageContext:
    """The package being evaluated; ``what`` names the caller for the error outside one (or makes that name)."""
    ctx: PackageContext | None = getattr(_state, "ctx", None)
    if ctx is None:
        raise _outside_build_file(what() if callable(what) else what)
    return ctx


def _outside_build_file(what: str) -> BuildFileError:
    loc = frame_location(sys._getframe(2))
    return BuildFileError.at(
        loc,
        f"{what} can only be used while a BUILD.marin file is evaluated "
        "(in the file itself or in a function it calls), not at the top level of a loaded file",
    )


class package_scope:  # noqa: N801 - used as a context manager, reads like a function
    """Context manager making ``ctx`` the current package for this thread (``None``: no package)."""

    def __init__(self, ctx: PackageContext | None) -> None:
        self.ctx = ctx
        self.previous: PackageContext | None = None

    def __enter__(self) -> PackageContext | None:
        self.previous = getattr(_state, "ctx", None)
        _state.ctx = self.ctx
        return self.ctx

    def __exit__(self, *exc: Any) -> None:
        _state.ctx = self.previous


def code_position(code: CodeType, lasti: int) -> tuple[int | None, int | None]:
    """``(line, column)`` (column 0-based) of the instruction at byte offset ``lasti`` of ``code``."""
    entry = _POSITIONS.get(id(code))  # by id: hashing a large code object costs more than the lookup saves
    if entry is None or entry[0] is not code:
        entry = _POSITIONS[id(code)] = (code, list(code.co_positions()))
    table = entry[1]
    index = lasti // 2
    if 0 <= index < len(table):
        line, _end, col, _end_col = table[index]
        return line, col
    return None, None


def code_location(frame: FrameType, display: str) -> Location:
    line, col = code_position(frame.f_code, frame.f_lasti)
    return Location(display, line or frame.f_lineno or 1, (col or 0) + 1)


def frame_location(frame: FrameType | None, prefer: str | None = None) -> Location:
    """Location of the innermost dialect frame at or above ``frame``.

    With ``prefer`` (a code filename), the innermost frame of that file wins instead, e.g.
    the BUILD file line that called a macro that declared a target.
    """
    return site_location(frame_site(frame, prefer))


Site = tuple[str, CodeType, int] | Location
"""Where a call happened, cheaply: ``(display path, code, f_lasti)``, turned into a ``Location``
(which needs the code's position table) only when asked; or a ``Location``. Not ``f_lineno``:
CPython finds it by scanning the line table from the start of the code, so reading it at every
rule call of a long BUILD file costs time quadratic in the file's length."""


def frame_site(frame: FrameType | None, prefer: str | None = None) -> Site:
    """``frame_location`` without computing the column yet (see ``site_location``)."""
    files = _DIALECT_FILES
    first: FrameType | None = None
    f = frame
    while f is not None:
        filename = f.f_code.co_filename
        if filename in files:
            if prefer is None or filename == prefer:
                return (files[filename], f.f_code, f.f_lasti)
            if first is None:
                first = f
        f = f.f_back
    if first is not None:
        return (files[first.f_code.co_filename], first.f_code, first.f_lasti)
    return Location("<unknown>", 1, 1)


def site_location(site: Site) -> Location:
    """The ``Location`` of a ``frame_site``."""
    if isinstance(site, Location):
        return site
    display, code, lasti = site
    line, col = code_position(code, lasti)
    return Location(display, line or _line_of(code, lasti) or 1, (col or 0) + 1)


def _line_of(code: CodeType, lasti: int) -> int | None:
    """The line of the instruction at byte offset ``lasti``, as ``frame.f_lineno`` gives it."""
    for start, end, line in code.co_lines():
        if start <= lasti < end:
            return line
    return None
