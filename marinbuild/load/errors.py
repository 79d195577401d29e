"""Load errors: every problem found while loading BUILD files is a located ``BuildFileError``, one ``path:line:col:
message`` line (workspace-relative path) the CLI prints as is (exit 2); a message longer than ``MAX_MESSAGE_CHARS``
(``fail()`` of a large value) is cut. A load that finds several errors raises one carrying the rest, fixed in one pass.
``LocatedLater``, raised by Python code Starlark called, becomes a ``BuildFileError`` at the call. ``WorkspaceError``
has no line: no workspace, or a bad table."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

MAX_MESSAGE_CHARS = 500
_CUT_NOTE = 40  # room for the note a cut message ends with: a message this much longer is not cut (again)


def bounded(message: str) -> str:
    """``message`` cut to ``MAX_MESSAGE_CHARS`` characters, saying how many more there were (idempotent)."""
    if len(message) <= MAX_MESSAGE_CHARS + _CUT_NOTE:
        return message
    return f"{message[:MAX_MESSAGE_CHARS]}... ({len(message) - MAX_MESSAGE_CHARS} more characters)"


@dataclass(frozen=True, slots=True)
class Location:
    """A position in a file: ``path`` as displayed (workspace-relative when inside it), 1-based line and column."""

    path: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


class BuildFileError(Exception):
    """An error at ``path:line:col`` (its ``str()``'s start); the same load's other errors in ``more_errors``."""

    def __init__(self, path: str | os.PathLike[str], line: int, col: int, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.col = col
        self.message = message = bounded(message)
        self.more_errors: tuple[BuildFileError, ...] = ()
        super().__init__(f"{self.path}:{line}:{col}: {message}")

    @classmethod
    def at(cls, location: Location, message: str) -> BuildFileError:
        return cls(location.path, location.line, location.col, message)

    @property
    def location(self) -> Location:
        return Location(self.path, self.line, self.col)

    @property
    def all_errors(self) -> tuple[BuildFileError, ...]:
        return (self, *self.more_errors)

    def __reduce__(self):  # keep pickling (e.g. across processes) working with our signature
        return (type(self), (self.path, self.line, self.col, self.message))


class LocatedLater(Exception):
    """A problem found by a Python function Starlark called; reported at the location of that call."""


class WorkspaceError(Exception):
    """No workspace could be found, or its ``[tool.marinbuild]`` configuration is invalid."""


def display_path(path: str | os.PathLike[str], root: Path | None) -> str:
    """``path`` relative to ``root`` when it lies inside it, else as given (always with '/')."""
    p = Path(path)
    return p.relative_to(root).as_posix() if root is not None and p.is_relative_to(root) else p.as_posix()
