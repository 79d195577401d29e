"""JSON encoding of version values and infos, byte-compatible with Marin's ``CustomJsonEncoder``.

Unlike Marin's, it does not import jax: jax dtypes are recognised only when jax is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import timedelta
from enum import Enum
from pathlib import PurePath
from typing import Any


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
        if isinstance(o, timedelta):
            return {"days": o.days, "seconds": o.seconds, "microseconds": o.microseconds}
        if isinstance(o, PurePath):
            return str(o)
        if isinstance(o, Enum):
            return o.value
        if _is_jax_float_type(o):
            return str(o)
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            # What dataclasses.asdict gives, without its deep copy: nested values are encoded in turn.
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        return str(o)


dumps_sorted = MarinJsonEncoder(sort_keys=True).encode
"""``json.dumps(x, sort_keys=True, cls=CustomJsonEncoder)`` as Marin computes version strings
(one reusable encoder: ``encode`` keeps no state between calls)."""


def dumps_indented(obj: Any) -> str:
    """The form Marin writes info files in (``indent=2``, keys in insertion order)."""
    return json.dumps(obj, indent=2, cls=MarinJsonEncoder)
