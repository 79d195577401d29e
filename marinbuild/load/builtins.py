"""The names marinbuild adds to Starlark's own: ``checkpoint``, ``glob``, ``package_name``, ``print``, ``tpu``
(docs/build-files.md).

``glob`` and ``package_name`` only work while a BUILD file is evaluated. A problem raises ``BuiltinError``, which the
evaluator reports at the call's location. ``Struct`` is the record rule implementations get as ``ctx.attr``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from marinbuild.core.resources import check_slices, tpu_slice
from marinbuild.load.context import _state, current_package
from marinbuild.load.errors import LocatedLater
from marinbuild.load.frozen import MIRRORED_KEY
from marinbuild.load.glob import GlobPatternError, glob_files, list_package_files

__all__ = ["BUILTINS", "BuiltinError", "Struct", "checkpoint", "glob", "mirrored", "package_name", "tpu"]

logger = logging.getLogger("marinbuild.build")


class BuiltinError(LocatedLater):
    """A builtin was called wrongly; reported at the call's ``path:line:col``."""


def _print(*args: Any, sep: str = " ") -> None:
    """``print()``: logs ``path: text`` (the BUILD file evaluated) at INFO level on ``marinbuild.build``."""
    ctx = getattr(_state, "ctx", None)
    logger.info("%s: %s", ctx.display if ctx is not None else "load", sep.join(str(a) for a in args))


def package_name() -> str:
    """The package of the BUILD file being evaluated, e.g. ``"experiments/tutorials"``."""
    return current_package("package_name()").package


def glob(include: Any, exclude: Any = (), allow_empty: bool = False) -> list[str]:
    """Source files of the current package matching ``include`` and not ``exclude`` (sorted, relative)."""
    ctx = current_package("glob()")
    for what, patterns in (("include", include), ("exclude", exclude)):
        if not isinstance(patterns, list | tuple) or not all(isinstance(p, str) for p in patterns):
            raise BuiltinError(f"glob(): {what} must be a list of pattern strings, got {patterns!r}")
    if ctx.glob_files is None:
        ctx.glob_files = list_package_files(ctx.package_dir)
    try:
        found = glob_files(ctx.glob_files, include, exclude)
    except GlobPatternError as exc:
        raise BuiltinError(f"glob(): {exc}") from None
    if not found and not allow_empty:
        raise BuiltinError(
            f"glob({list(include)!r}) matched no files in package '{ctx.package}'; "
            "pass allow_empty = True if that is expected"
        )
    return found


def checkpoint(target: Any, step: Any) -> dict[str, Any]:
    """``checkpoint(":phase1", step = 660000)``: what a training target starts from (a checkpoint hand-off)."""
    return {"checkpoint": target, "step": step}


def mirrored(path: Any, budget_gb: Any = 10) -> dict[str, Any]:
    """``mirrored("raw/dolma/v1.7", budget_gb = 50)``: a path a step reads through ``mirror://`` (copied once into its
    worker's region), as Marin's ``mirrored()``; the value ``thaw`` makes a ``MirroredValue`` of."""
    if not isinstance(path, str) or path.startswith("mirror://"):
        raise BuiltinError(f"mirrored(): the path must be a string (not already mirror://), got {path!r}")
    if isinstance(budget_gb, bool) or not isinstance(budget_gb, int | float) or budget_gb <= 0:
        raise BuiltinError(f"mirrored(): budget_gb must be a positive number of GB, got {budget_gb!r}")
    return {MIRRORED_KEY: path, "budget_gb": budget_gb}


def tpu(tpu_type: str, cpu: float | None = None, memory: str | None = None, slices: int = 1) -> dict[str, Any]:
    """The ``resources`` of a step that needs a whole TPU slice, e.g. ``tpu("v4-2048")``, ``tpu("v5litepod-256")``."""
    if not isinstance(tpu_type, str):
        raise BuiltinError(f"tpu(): the TPU type must be a string such as 'v4-8', got {tpu_type!r}")
    try:
        request: dict[str, Any] = {"tpu": tpu_slice(tpu_type).type}
        check_slices(slices, tpu_type)
    except ValueError as exc:
        raise BuiltinError(f"tpu(): {exc}") from None
    if slices > 1:
        request["slices"] = slices
    if cpu is not None:
        request["cpu"] = cpu
    if memory is not None:
        request["memory"] = memory
    return request


BUILTINS: dict[str, Callable[..., Any]] = {
    "checkpoint": checkpoint,
    "glob": glob,
    "mirrored": mirrored,
    "package_name": package_name,
    "print": _print,
    "tpu": tpu,
}
"""What every BUILD and ``.star`` file sees besides Starlark's standard functions."""


class Struct:
    """``Struct(a=1, b="x")``: an immutable record with attribute access (a rule implementation's ``ctx.attr``)."""

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
