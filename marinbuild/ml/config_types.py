"""Field values of the ``train_lm`` config dataclasses checked against their type annotations.

``check_field_types`` names the field and the type (``learning_rate: expected a number, got str 'fast'``) rather than
let a wrong type surface far away. Understood: ``int``, ``float`` (ints too), ``str``, ``bool`` (never a number),
``None``, ``Any``, ``list[X]`` (list or tuple, as Starlark has both), ``dict[str, X]`` and unions."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from marinbuild.load.attrs import AttrValueError, describe


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def check_field_types(cls: type, values: Mapping[str, Any]) -> None:
    """Raise ``AttrValueError("NAME: expected TYPE, got ...")`` for the first field of ``values`` of a wrong type."""
    hints = _hints(cls)
    for name, value in values.items():
        hint = hints.get(name)
        if hint is not None and not matches(value, hint):
            raise AttrValueError(f"{name}: expected {expected(hint)}, got {describe(value)}")


def matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type ``hint``."""
    if hint is Any:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is types.UnionType or origin is typing.Union:
        return any(matches(value, arg) for arg in args)
    if hint is type(None) or hint is None:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if hint is list or origin is list:
        return isinstance(value, list | tuple) and (not args or all(matches(x, args[0]) for x in value))
    if hint is dict or origin is dict:
        return isinstance(value, Mapping) and (
            not args or all(isinstance(k, str) and matches(v, args[1]) for k, v in value.items())
        )
    return isinstance(value, hint) if isinstance(hint, type) else True


def expected(hint: Any, plural: bool = False) -> str:
    """``hint`` in words: ``a number``, ``an int or a list of ints``, ``a string or None``."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is types.UnionType or origin is typing.Union:
        parts = [expected(a, plural) for a in args if a is not type(None)]
        if type(None) in args:
            parts.append("None")
        return " or ".join(parts)
    if hint is list or origin is list:
        inner = args[0] if args else Any
        return "lists" if plural else ("a list" if inner is Any else f"a list of {expected(inner, plural=True)}")
    if hint is dict or origin is dict:
        return "dicts" if plural else "a dict"
    words = {int: ("an int", "ints"), float: ("a number", "numbers"), str: ("a string", "strings")}
    words[bool] = ("True or False", "booleans")
    return (words[hint][1 if plural else 0]) if hint in words else getattr(hint, "__name__", str(hint))
