"""JSON encoding of version values and infos, byte-compatible with Marin's ``CustomJsonEncoder``.

Unlike Marin's, it does not import jax: jax dtypes are recognised only when jax is loaded.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Any

from marinbuild.core.fields import field_names


def _is_jax_float_type(o: Any) -> bool:
    jnp = sys.modules.get("jax.numpy")
    if jnp is None:
        return False
    try:
        return o in (jnp.float32, jnp.bfloat16)
    except Exception:  # an object whose __eq__ is not a plain bool
        return False


class MarinJsonEncoder(json.JSONEncoder):
    """Encodes timedeltas, paths, enums, dataclasses and jax dtypes the way Marin does; anything else as str."""

    def default(self, o: Any) -> Any:
        # A timedelta or a path exists only once its module is loaded: look the classes up, do not import them.
        datetime = sys.modules.get("datetime")
        if datetime is not None and isinstance(o, datetime.timedelta):
            return {"days": o.days, "seconds": o.seconds, "microseconds": o.microseconds}
        pathlib = sys.modules.get("pathlib")
        if pathlib is not None and isinstance(o, pathlib.PurePath):
            return str(o)
        if isinstance(o, Enum):
            return o.value
        if _is_jax_float_type(o):
            return str(o)
        names = None if isinstance(o, type) else field_names(o)
        if names is not None:
            # What dataclasses.asdict gives, without its deep copy: nested values are encoded in turn.
            return {name: getattr(o, name) for name in names}
        return str(o)


json_str = json.encoder.encode_basestring_ascii
"""``json.dumps(a_str)``, without its call chain."""


dumps_sorted = MarinJsonEncoder(sort_keys=True).encode
"""``json.dumps(x, sort_keys=True, cls=CustomJsonEncoder)``: how Marin computes version strings."""


def dumps_indented(obj: Any, depth: int = 0) -> str:
    """The form Marin writes info files in: ``json.dumps(obj, indent=2, cls=CustomJsonEncoder)``, keys in
    insertion order. The same text as json's, written here because json indents with a pure-Python
    generator per nesting level, and every step's ``.executor_info`` is written this way. ``depth``: the
    text as it reads nested that many levels deep in a bigger document (inner lines indented 2 * depth more)."""
    out: list[str] = []
    _indent_into(out, obj, "\n" + "  " * depth, {})
    return "".join(out)


_default = MarinJsonEncoder().default


def _float_text(value: float) -> str:
    if value != value:
        return "NaN"
    if value == _INFINITY:
        return "Infinity"
    if value == -_INFINITY:
        return "-Infinity"
    return float.__repr__(value)


_INFINITY = float("inf")


def _indent_into(out: list[str], o: Any, newline: str, markers: dict[int, Any]) -> None:
    """Append the ``indent=2`` JSON of ``o`` at the nesting whose line break (and indent) is ``newline``; the
    checks come in json's order (``json.encoder._make_iterencode``), so subclasses encode as they do there."""
    if isinstance(o, str):
        out.append(json_str(o))
    elif o is None:
        out.append("null")
    elif o is True:
        out.append("true")
    elif o is False:
        out.append("false")
    elif isinstance(o, int):
        out.append(int.__repr__(o))
    elif isinstance(o, float):
        out.append(_float_text(o))
    elif isinstance(o, list | tuple | dict):
        if not o:
            out.append("{}" if isinstance(o, dict) else "[]")
            return
        marker = id(o)
        if marker in markers:
            raise ValueError("Circular reference detected")
        markers[marker] = o
        inner = newline + "  "
        separator = "," + inner
        if isinstance(o, dict):
            out.append("{" + inner)
            first = True
            for key, value in o.items():
                if isinstance(key, str):
                    pass
                elif isinstance(key, float):
                    key = _float_text(key)
                elif key is True:
                    key = "true"
                elif key is False:
                    key = "false"
                elif key is None:
                    key = "null"
                elif isinstance(key, int):
                    key = int.__repr__(key)
                else:
                    raise TypeError(f"keys must be str, int, float, bool or None, not {key.__class__.__name__}")
                if not first:
                    out.append(separator)
                first = False
                out.append(json_str(key) + ": ")
                _indent_into(out, value, inner, markers)
            out.append(newline + "}")
        else:
            out.append("[" + inner)
            first = True
            for value in o:
                if not first:
                    out.append(separator)
                first = False
                _indent_into(out, value, inner, markers)
            out.append(newline + "]")
        del markers[marker]
    else:
        marker = id(o)
        if marker in markers:
            raise ValueError("Circular reference detected")
        markers[marker] = o
        _indent_into(out, _default(o), newline, markers)
        del markers[marker]
