"""Small text helpers for the cache and why reports: ages, sizes, short JSON."""

from __future__ import annotations

import json
from typing import Any


def format_age(seconds: float | None) -> str:
    """``12s``, ``3m05s``, ``2h10m``, ``4d03h``; ``?`` when unknown."""
    if seconds is None:
        return "?"
    whole = int(max(seconds, 0.0))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5}


def parse_age(text: str) -> float:
    """Seconds of ``30d``, ``12h``, ``90m``, ``45s``, ``2w``; ValueError says what is expected."""
    number, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        seconds = float(number) * _AGE_UNITS[unit]
    except (KeyError, ValueError):
        raise ValueError(f"{text!r} is not an age: a number and a unit of s, m, h, d or w (e.g. 30d)") from None
    if seconds < 0:
        raise ValueError(f"{text!r} is not an age: it is negative")
    return seconds


def parse_size(text: str) -> int:
    """Bytes of ``500G``, ``1.5TB``, ``2TiB``, ``100MB``, ``4096``: decimal units, ``iB`` binary ones."""
    word = text.strip().lower().removesuffix("b")
    binary = word.endswith("i")
    word = word.removesuffix("i")
    unit = word[-1:] if word[-1:].isalpha() else ""
    try:
        base = _SIZE_UNITS[unit] if not binary else 1024 ** "bkmgtp".index(unit)
        size = int(float(word[: len(word) - len(unit)]) * base)
    except (KeyError, ValueError):
        raise ValueError(f"{text!r} is not a size: a number and a unit of K, M, G, T or P (e.g. 500G, 2TiB)") from None
    if size < 0:
        raise ValueError(f"{text!r} is not a size: it is negative")
    return size


def format_size(n: int) -> str:
    """``512 B``, ``1.5 KiB``, ``2.0 GiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024:
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def short_json(value: Any, limit: int = 80) -> str:
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
