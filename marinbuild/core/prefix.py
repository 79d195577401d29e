"""Where outputs go when nothing says: Marin's local default prefix (for settings, facade and ``mirror://``)."""

from __future__ import annotations

import os

DEFAULT_LOCAL_PREFIX = "/tmp/marin"  # Marin's, when MARIN_PREFIX is not set


def default_prefix() -> str:
    """``MARIN_PREFIX`` if set, else Marin's local default folder."""
    return os.environ.get("MARIN_PREFIX") or DEFAULT_LOCAL_PREFIX
