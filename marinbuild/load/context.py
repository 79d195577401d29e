"""The BUILD file being evaluated (per thread), for the functions BUILD files call back into.

Rule calls, ``glob()`` and ``package_name()`` are Python callables the Starlark evaluator
calls; they find the package they declare targets in, and the file's path, here. Outside a
BUILD file's evaluation (the top level of a loaded ``.star`` file) there is none.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.load.errors import LocatedLater
from marinbuild.load.target import Target

__all__ = ["OutsideBuildFileError", "PackageContext", "current_package", "package_scope"]


@dataclass
class PackageContext:
    """State of one BUILD file evaluation: where it is and the targets it has declared so far."""

    package: str
    package_dir: Path
    build_file: str  # the BUILD file's absolute path
    display: str  # the BUILD file's path in messages (the name Starlark knows it by)
    targets: dict[str, Target] = field(default_factory=dict)
    glob_files: list[str] | None = None  # the package's files (lazily listed by glob())


class OutsideBuildFileError(LocatedLater):
    """A BUILD-only function was called while no BUILD file is evaluated (its message says which)."""


_state = threading.local()


def current_package(what: str) -> PackageContext:
    """The package being evaluated; ``what`` names the caller in the error raised outside one."""
    ctx: PackageContext | None = getattr(_state, "ctx", None)
    if ctx is None:
        raise OutsideBuildFileError(
            f"{what} can only be used while a BUILD.marin file is evaluated "
            "(in the file itself or in a function it calls), not at the top level of a loaded file"
        )
    return ctx


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
