"""Inspecting and pruning the output cache under a prefix: ``cache status/show/ls/gc`` and ``clean``.

Library functions returning data, plus ``format_*`` text formatters; nothing prints.
``marinbuild.cache.why`` explains, per step, why a build would run it (``why``);
``marinbuild.cache.verify`` checks built outputs against their recorded digests (``cache verify``).
Both are imported by name, not from here, as the CLI needs them only for their own commands.
"""

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
    ls_as_dict,
    status_as_dict,
)
from marinbuild.cache.gc import GcResult, cache_gc, format_gc, needed_output_paths
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
    "ls_as_dict",
    "needed_output_paths",
    "status_as_dict",
]
