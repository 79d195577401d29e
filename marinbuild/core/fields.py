"""Dataclass field names, as the config walks and the JSON encoder read them.

Plain ``dataclasses.fields`` calls: a per-class cache showed no gain on ``bench/engine_bench.py``'s
10,000-step versions and no-op rows (docs/performance.md, "What was kept and why").
"""

from __future__ import annotations

import dataclasses
from typing import Any


def field_names(value: Any) -> tuple[str, ...] | None:
    """The field names of a dataclass instance (what ``dataclasses.fields`` lists), None for anything else."""
    cls = type(value)
    return tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None


def init_shape(value: Any) -> tuple[tuple[str, ...], bool] | None:
    """For a dataclass instance: the fields ``__init__`` takes (what ``dataclasses.replace`` passes on) and
    whether calling the class with them is all ``replace`` does (False with ``InitVar`` or ``ClassVar``
    pseudo-fields, which ``replace`` handles itself); None for anything else."""
    cls = type(value)
    if not dataclasses.is_dataclass(cls):
        return None
    all_fields = dataclasses.fields(cls)
    names = tuple(f.name for f in all_fields if f.init)
    return names, len(getattr(cls, "__dataclass_fields__", {})) == len(all_fields)
