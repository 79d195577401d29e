"""Dataclass fields, cached per class: config walks ask for them at every step of every build.

``dataclasses.fields`` builds a new tuple from the class's field table on each call; a 10,000-step
build walks tens of thousands of config objects.
"""

from __future__ import annotations

import dataclasses
from typing import Any

_FIELD_NAMES: dict[type, tuple[str, ...] | None] = {}
_INIT_SHAPES: dict[type, tuple[tuple[str, ...], bool] | None] = {}


def field_names(value: Any) -> tuple[str, ...] | None:
    """The field names of a dataclass instance (what ``dataclasses.fields`` lists), None for anything else."""
    cls = type(value)
    try:
        return _FIELD_NAMES[cls]
    except KeyError:
        names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
        _FIELD_NAMES[cls] = names
        return names


def init_shape(value: Any) -> tuple[tuple[str, ...], bool] | None:
    """For a dataclass instance: the fields ``__init__`` takes (what ``dataclasses.replace`` passes on) and
    whether calling the class with them is all ``replace`` does (False with ``InitVar`` or ``ClassVar``
    pseudo-fields, which ``replace`` handles itself); None for anything else."""
    cls = type(value)
    try:
        return _INIT_SHAPES[cls]
    except KeyError:
        shape = None
        if dataclasses.is_dataclass(cls):
            all_fields = dataclasses.fields(cls)
            names = tuple(f.name for f in all_fields if f.init)
            shape = (names, len(getattr(cls, "__dataclass_fields__", {})) == len(all_fields))
        _INIT_SHAPES[cls] = shape
        return shape
