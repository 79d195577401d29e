"""JSON encoding of version values and infos, byte-compatible with Marin's ``CustomJsonEncoder``, without
importing jax (its dtypes are recognised only when jax is loaded)."""

from __future__ import annotations

import dataclasses
import json
import sys
from enum import Enum
from typing import Any

from marinbuild.core.placeholders import MirroredValue


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
        if type(o) is MirroredValue:  # transparent for versions, also inside a versioned value (BUILD files' mirrored)
            return o.value
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            # What dataclasses.asdict gives, without its deep copy: nested values are encoded in turn.
            return {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        return str(o)


json_str = json.encoder.encode_basestring_ascii  # ``json.dumps(a_str)``, without its call chain.


dumps_sorted = MarinJsonEncoder(sort_keys=True).encode
"""``json.dumps(x, sort_keys=True, cls=CustomJsonEncoder)``: how Marin computes version strings."""


def dumps_indented(obj: Any) -> str:
    """Marin's info file form, ``json.dumps(obj, indent=2, cls=CustomJsonEncoder)``."""
    return json.dumps(obj, indent=2, cls=MarinJsonEncoder)
