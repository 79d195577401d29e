"""Frozen values: what a loaded file's top-level lists, dicts and sets become.

``FrozenList`` and ``FrozenDict`` subclass ``list`` and ``dict`` so that equality, ``+``,
``|``, iteration, slicing and JSON encoding behave as for ordinary values, but every
mutating method or operator raises ``FrozenValueError`` explaining how to copy the value.
This guards against accidental mutation of values shared between BUILD files; it is not
a security boundary (``list.append(frozen, x)`` still works, as it would in any Python).
"""

from __future__ import annotations

import types
from typing import Any

__all__ = ["FrozenDict", "FrozenList", "FrozenValueError", "freeze", "freeze_function", "thaw"]


class FrozenValueError(TypeError):
    """An attempt to mutate a frozen value."""


def _frozen_list_error(*_args: Any, **_kwargs: Any) -> Any:
    raise FrozenValueError(
        "cannot modify a frozen list (values defined at the top level of a loaded file are immutable); "
        "make a copy first with list(value) or value + [...]"
    )


def _frozen_dict_error(*_args: Any, **_kwargs: Any) -> Any:
    raise FrozenValueError(
        "cannot modify a frozen dict (values defined at the top level of a loaded file are immutable); "
        "make a copy first with dict(value) or value | {...}"
    )


class FrozenList(list):
    """An immutable ``list``."""

    __slots__ = ()

    append = extend = insert = pop = remove = clear = sort = reverse = _frozen_list_error
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _frozen_list_error

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    def __reduce__(self):
        return (FrozenList, (list(self),))


class FrozenDict(dict):
    """An immutable ``dict``."""

    __slots__ = ()

    clear = pop = popitem = setdefault = update = _frozen_dict_error
    __setitem__ = __delitem__ = __ior__ = _frozen_dict_error

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self.items()))

    def __reduce__(self):
        return (FrozenDict, (dict(self),))


def freeze(value: Any) -> Any:
    """A deeply immutable version of ``value``: lists, tuples, dicts and sets are copied, other values kept."""
    cls = type(value)
    if cls in (str, int, float, bool, type(None), FrozenList, FrozenDict, frozenset):
        return value
    if isinstance(value, list):
        return FrozenList(freeze(x) for x in value)
    if isinstance(value, tuple) and cls is tuple:
        return tuple(freeze(x) for x in value)
    if isinstance(value, dict):
        return FrozenDict((k, freeze(v)) for k, v in value.items())
    if isinstance(value, set):
        return frozenset(freeze(x) for x in value)
    return value


def thaw(value: Any) -> Any:
    """A plain mutable copy of a (possibly frozen) value: lists, dicts and tuples are copied deeply."""
    if isinstance(value, list):
        return [thaw(x) for x in value]
    if isinstance(value, dict):
        return {k: thaw(v) for k, v in value.items()}
    if type(value) is tuple:
        return tuple(thaw(x) for x in value)
    return value


def freeze_function(fn: types.FunctionType) -> None:
    """Freeze ``fn``'s default argument values in place (so ``def f(x=[])`` cannot leak state)."""
    if fn.__defaults__:
        fn.__defaults__ = tuple(freeze(x) for x in fn.__defaults__)
    if fn.__kwdefaults__:
        fn.__kwdefaults__ = {k: freeze(v) for k, v in fn.__kwdefaults__.items()}
    inner = getattr(fn, "__wrapped__", None)
    if isinstance(inner, types.FunctionType) and inner is not fn:
        freeze_function(inner)
