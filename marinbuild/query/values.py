"""Attribute values as queries see them: Bazel-style text for ``attr()``, labels for ``labels()``, JSON-safe data for
``--output=json``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

_MAX_DEPTH = 32


def attr_text(value: Any, _depth: int = 0) -> str:
    """``value`` printed as Bazel prints attributes: lists as ``[a, b]``, dicts as ``{k: v}``, else ``str``."""
    if _depth > _MAX_DEPTH:
        return "..."
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(attr_text(v, _depth + 1) for v in value) + "]"
    if isinstance(value, (set, frozenset)):
        return "[" + ", ".join(sorted(attr_text(v, _depth + 1) for v in value)) + "]"
    if isinstance(value, Mapping):
        items = (f"{attr_text(k, _depth + 1)}: {attr_text(v, _depth + 1)}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    return str(value)


def json_safe(value: Any, _depth: int = 0) -> Any:
    """``value`` as JSON data: containers converted, non-finite floats and other objects as ``str``."""
    if _depth > _MAX_DEPTH:
        return "..."
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return [json_safe(v, _depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v, _depth + 1) for v in value), key=str)
    if isinstance(value, Mapping):
        return {str(k): json_safe(v, _depth + 1) for k, v in value.items()}
    return str(value)


def label_strings(value: Any) -> list[str]:
    """The strings in an attribute value: itself, a list/tuple/set's items, or a dict's keys and values."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        value = [*value.keys(), *value.values()]
    if isinstance(value, (set, frozenset)):
        return sorted(v for v in value if isinstance(v, str))
    return [v for v in value if isinstance(v, str)] if isinstance(value, (list, tuple)) else []


def resolve_label(ref: str, owner: str) -> str:
    """``ref`` as an absolute label: ``:name`` in ``owner``'s package, ``//pkg`` as ``//pkg:pkg``."""
    if ref.startswith(":"):
        return owner.split(":", 1)[0] + ref
    if (ref.startswith("//") or ref.startswith("@")) and ":" not in ref:
        return f"{ref}:{ref.rstrip('/').rsplit('/', 1)[-1]}"
    return ref
