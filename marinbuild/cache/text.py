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
