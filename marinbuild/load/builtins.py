"""The names every dialect file sees: a whitelist of Python builtins plus the BUILD functions.

Python builtins: ``len range list dict tuple str int float bool sorted reversed enumerate
zip min max sum any all abs repr`` and ``print`` (which logs to ``marinbuild.build``).
BUILD functions: ``load``, ``glob``, ``package_name``, ``fail``, ``struct``. They all live in
``__builtins__`` so that a file's globals hold only what it defines or loads. Every
``def``/``lambda`` is wrapped by ``recursion_guard``.
"""

from __future__ import annotations

import builtins as _py
import functools
import logging
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from marinbuild.load.context import current_package, frame_location
from marinbuild.load.dialect import GUARD_NAME
from marinbuild.load.errors import BuildFileError
from marinbuild.load.glob import GlobPatternError, glob_files, list_package_files

__all__ = ["LOADS_KEY", "SAFE_BUILTINS", "Struct", "base_globals", "recursion_guard"]

logger = logging.getLogger("marinbuild.build")

_ALLOWED = (
    "len range list dict tuple str int float bool sorted reversed enumerate zip min max sum any all abs repr".split()
)
LOADS_KEY = "__marin_loads__"
"""Global of a dialect file holding its resolved ``load()`` modules: ``{label text: exports}``."""


def _print(*args: Any, sep: str = " ") -> None:
    """``print()`` in BUILD files: logs ``path:line:col: text`` at INFO level."""
    location = frame_location(sys._getframe(1))
    logger.info("%s: %s", location, sep.join(str(a) for a in args))


def fail(*args: Any, sep: str = " ") -> None:
    """Stop loading with an error at the caller's location."""
    location = frame_location(sys._getframe(1))
    raise BuildFileError.at(location, f"fail: {sep.join(str(a) for a in args)}")


def package_name() -> str:
    """The package of the BUILD file being evaluated, e.g. ``"experiments/tutorials"``."""
    return current_package("package_name()").package


def glob(include: Iterable[str], exclude: Iterable[str] = (), allow_empty: bool = False) -> list[str]:
    """Source files of the current package matching ``include`` and not ``exclude`` (sorted, relative)."""
    ctx = current_package("glob()")
    location = frame_location(sys._getframe(1))
    for what, patterns in (("include", include), ("exclude", exclude)):
        if isinstance(patterns, str) or not isinstance(patterns, list | tuple):
            raise BuildFileError.at(location, f"glob(): {what} must be a list of patterns, got {patterns!r}")
    if ctx.glob_files is None:
        ctx.glob_files = list_package_files(ctx.package_dir)
    try:
        found = glob_files(ctx.glob_files, include, exclude)
    except GlobPatternError as exc:
        raise BuildFileError.at(location, f"glob(): {exc}") from None
    if not found and not allow_empty:
        raise BuildFileError.at(
            location,
            f"glob({list(include)!r}) matched no files in package '{ctx.package}'; "
            "pass allow_empty = True if that is expected",
        )
    return found


class Struct:
    """``struct(a=1, b="x")``: an immutable record with attribute access."""

    __slots__ = ("_fields",)

    def __init__(self, **fields: Any) -> None:
        object.__setattr__(self, "_fields", dict(fields))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(
                f"struct has no field {name!r} (fields: {', '.join(self._fields) or 'none'})"
            ) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("struct values are immutable: make a new struct()")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Struct) and self._fields == other._fields

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._fields.items())))

    def __repr__(self) -> str:
        return "struct(" + ", ".join(f"{k}={v!r}" for k, v in self._fields.items()) + ")"

    def __reduce__(self):
        return (_make_struct, (self._fields,))


def _make_struct(fields: dict[str, Any]) -> Struct:
    return Struct(**fields)


_active = threading.local()


def recursion_guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a dialect function so that calling it while it is already running is a located error."""
    label = "lambda" if fn.__name__ == "<lambda>" else fn.__name__

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        stack: list[tuple[Callable[..., Any], str]] | None = getattr(_active, "stack", None)
        if stack is None:
            stack = _active.stack = []
        for i, (running, _name) in enumerate(stack):
            if running is fn:
                chain = " -> ".join([n for _f, n in stack[i:]] + [label])
                location = frame_location(sys._getframe(1))
                raise BuildFileError.at(location, f"recursion is not allowed in BUILD files: {chain}")
        stack.append((fn, label))
        try:
            return fn(*args, **kwargs)
        finally:
            stack.pop()

    return guarded


def load(label: str, *symbols: str, **aliases: str) -> None:
    """Bind symbols of an already resolved module into the calling file's globals."""
    scope = sys._getframe(1).f_globals
    exports = scope[LOADS_KEY][label]
    for name in symbols:
        scope[name] = exports[name]
    for local, name in aliases.items():
        scope[local] = exports[name]


SAFE_BUILTINS: dict[str, Any] = {name: getattr(_py, name) for name in _ALLOWED}
SAFE_BUILTINS.update(print=_print, load=load, glob=glob, package_name=package_name, fail=fail, struct=Struct)


def base_globals(name: str, loads: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """A fresh globals dict for one dialect file named ``name`` whose ``load()``s resolved to ``loads``."""
    return {"__builtins__": SAFE_BUILTINS, "__name__": name, GUARD_NAME: recursion_guard, LOADS_KEY: loads}
