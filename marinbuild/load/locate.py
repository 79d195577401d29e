"""Finer error locations, computed only when one is shown: the column of a call on a line, the ``key=`` of a call.
Starlark's call stack names file and line; the column comes from the file's syntax, read once per file version
by ``ast`` (Starlark's syntax is a subset of Python's)."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from marinbuild.load.errors import Location

_Calls = dict[tuple[int, int], tuple[str | None, dict[str, tuple[int, int]]]]
"""Each call of a file by ``(line, column)``: the name it calls (a plain name, else None), its keywords' places."""


@lru_cache(maxsize=64)
def _calls(filename: str, mtime_ns: int) -> _Calls:
    try:
        tree = ast.parse(Path(filename).read_bytes(), filename=filename)
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    calls: _Calls = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            calls[(node.lineno, node.col_offset + 1)] = (
                callee,
                {kw.arg: (kw.lineno, kw.col_offset + 1) for kw in node.keywords if kw.arg is not None},
            )
    return calls


def _calls_of(filename: str) -> _Calls:
    try:
        mtime = Path(filename).stat().st_mtime_ns
    except OSError:
        return {}
    return _calls(filename, mtime)


def call_location(display: str, filename: str, line: int, callee: str | None = None) -> Location:
    """``display:line:col`` of the first call (of ``callee`` if any) on ``line`` of ``filename``, else column 1."""
    calls = [(col, name) for (ln, col), (name, _kws) in _calls_of(filename).items() if ln == line]
    named = [col for col, name in calls if name == callee] if callee is not None else []
    cols = named or [col for col, _name in calls]
    return Location(display, line, min(cols) if cols else 1)


def keyword_location(call: Location, filename: str, keyword: str) -> Location:
    """Where ``keyword=`` is written in the call at ``call`` in ``filename``; ``call`` if not found."""
    found = _calls_of(filename).get((call.line, call.col), (None, {}))[1].get(keyword)
    return Location(call.path, *found) if found else call
