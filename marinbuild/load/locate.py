"""Finer error locations, computed only when an error is reported: the ``key=`` of a call."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from marinbuild.load.errors import Location

__all__ = ["keyword_location"]


@lru_cache(maxsize=64)
def _calls(filename: str, mtime_ns: int) -> dict[tuple[int, int], dict[str, tuple[int, int]]]:
    try:
        tree = ast.parse(Path(filename).read_bytes(), filename=filename)
    except (OSError, SyntaxError, ValueError):
        return {}
    calls: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            calls[(node.lineno, node.col_offset + 1)] = {
                kw.arg: (kw.lineno, kw.col_offset + 1) for kw in node.keywords if kw.arg is not None
            }
    return calls


def keyword_location(call: Location, filename: str, keyword: str) -> Location:
    """Where ``keyword=`` is written in the call at ``call`` in ``filename``; ``call`` if not found."""
    try:
        mtime = Path(filename).stat().st_mtime_ns
    except OSError:
        return call
    found = _calls(filename, mtime).get((call.line, call.col), {}).get(keyword)
    return Location(call.path, *found) if found else call
