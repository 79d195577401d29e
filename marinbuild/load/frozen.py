"""Immutable attribute values for the Python side (Starlark freezes its own): a rule implementation receives dict
attributes as ``FrozenDict`` (mutating methods raise ``FrozenValueError``), so one target cannot change the values
another sees; ``thaw`` copies them back, and makes the ``MirroredValue`` of each BUILD file's ``mirrored(path)``
(a dict ``{"mirrored": path, "budget_gb": n}``), so a step gets ``mirror://path`` as a Marin step does, its version
the path's."""

from __future__ import annotations

from typing import Any

from marinbuild.core.placeholders import MirroredValue

MIRRORED_KEY = "mirrored"


class FrozenValueError(TypeError):
    """An attempt to mutate a frozen value."""


def _frozen_dict_error(*_args: Any, **_kwargs: Any) -> Any:
    raise FrozenValueError("cannot modify a frozen dict (attribute values are immutable); copy it with dict(value)")


class FrozenDict(dict):
    """An immutable ``dict``."""

    __slots__ = ()

    clear = pop = popitem = setdefault = update = _frozen_dict_error
    __setitem__ = __delitem__ = __ior__ = _frozen_dict_error

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


def is_mirrored(value: Any) -> bool:
    """``value`` is a BUILD file's ``mirrored(path, budget_gb)``."""
    return isinstance(value, dict) and len(value) == 2 and MIRRORED_KEY in value and "budget_gb" in value


def thaw(value: Any) -> Any:
    """A plain mutable copy of a (possibly frozen) value: lists, dicts and tuples are copied deeply."""
    if isinstance(value, list):
        return [thaw(x) for x in value]
    if isinstance(value, dict):
        if is_mirrored(value):
            return MirroredValue(value[MIRRORED_KEY], value["budget_gb"])
        return {k: thaw(v) for k, v in value.items()}
    if type(value) is tuple:
        return tuple(thaw(x) for x in value)
    return value
