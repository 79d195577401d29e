"""``marinbuild query EXPR``: Bazel's query language over the target graph, plus cache states.

Pure: no file, network or cloud access; the caller supplies a ``QueryUniverse`` (graph, ``state_of``,
``expand_pattern``); ``session_universe`` builds one from a build session for the CLI. The grammar (``syntax.py``,
docs/query.md): target patterns, quoted words, ``$name``, ``let name = expr in expr``, ``union``/``+``,
``intersect``/``^``, ``except``/``-`` (left-associative, equal precedence), ``deps``, ``rdeps``, ``somepath``,
``allpaths``, ``kind``, ``attr``, ``filter``, ``labels``, ``some``, and the cache states ``built``, ``stale``,
``missing``, ``failed``, ``running``. Results are ordered dependencies first, ties by label."""

from __future__ import annotations

from marinbuild.query.errors import QueryError
from marinbuild.query.evaluate import evaluate
from marinbuild.query.functions import CACHE_STATES as STATES
from marinbuild.query.functions import FUNCTIONS
from marinbuild.query.output import OUTPUT_FORMATS, check_output, format_result
from marinbuild.query.parser import parse
from marinbuild.query.syntax import Query
from marinbuild.query.universe import QueryUniverse

__all__ = [
    "FUNCTIONS", "OUTPUT_FORMATS", "STATES", "Query", "QueryError", "QueryUniverse", "check_output", "evaluate",
    "format_result", "parse", "run_query"
]  # fmt: skip


def run_query(expr: str, universe: QueryUniverse, output: str = "label") -> str:
    """Parse, evaluate and format ``expr`` (checking ``output`` first, before any evaluation work)."""
    check_output(output)
    return format_result(evaluate(parse(expr), universe), universe, output)
