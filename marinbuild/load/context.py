"""The BUILD file being evaluated (per thread), for the Python callables BUILD files call back into (rules, ``glob()``,
``package_name()``). Outside a BUILD file's evaluation (a loaded ``.star`` file's top level) there is none."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from marinbuild.load.errors import LocatedLater
from marinbuild.load.target import Target


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


@contextmanager
def package_scope(ctx: PackageContext | None) -> Iterator[None]:
    """Make ``ctx`` the current package for this thread (``None``: no package)."""
    previous = getattr(_state, "ctx", None)
    _state.ctx = ctx
    try:
        yield
    finally:
        _state.ctx = previous
