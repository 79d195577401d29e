"""Inspecting and pruning the output cache under a prefix: ``cache status/show/ls/gc`` and ``clean``: library functions
returning data, plus ``format_*`` text formatters; nothing prints. ``cache.why`` (``why``) and ``cache.verify`` (``cache
verify``) are imported by name, only by their own commands."""

from marinbuild.cache.commands import (
    CacheRow,
    CleanResult,
    Entry,
    StepState,
    cache_ls,
    cache_show,
    cache_status,
    clean,
    format_clean,
    format_ls,
    format_show,
    format_table,
)
from marinbuild.cache.gc import GcResult, cache_gc, format_gc
from marinbuild.cache.text import format_age, format_size

__all__ = [
    "CacheRow",
    "CleanResult",
    "Entry",
    "GcResult",
    "StepState",
    "cache_gc",
    "cache_ls",
    "cache_show",
    "cache_status",
    "clean",
    "format_age",
    "format_clean",
    "format_gc",
    "format_ls",
    "format_show",
    "format_size",
    "format_table",
]
