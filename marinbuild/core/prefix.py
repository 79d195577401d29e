"""Where outputs go when nothing says: Marin's local default prefix.

One home for the constant so the CLI's settings, the engine, the Marin facade and ``mirror://``
resolution agree without importing each other. No I/O, no imports beyond ``os``.
"""

from __future__ import annotations

import os

DEFAULT_LOCAL_PREFIX = "/tmp/marin"
"""Marin's default prefix when ``MARIN_PREFIX`` is not set."""


def default_prefix() -> str:
    """``MARIN_PREFIX`` if set, else Marin's local default folder. Never a network call."""
    return os.environ.get("MARIN_PREFIX") or DEFAULT_LOCAL_PREFIX
