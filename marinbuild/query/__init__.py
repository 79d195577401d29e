"""``marinbuild query EXPR``: Bazel's query language over the target graph, plus cache states.

Pure: no file, network or cloud access here; the caller supplies a ``QueryUniverse`` (the
graph, ``state_of`` for cache states, ``expand_pattern`` for target patterns). The one exception,
``session_universe``, builds that universe from a build session for the CLI; nothing here imports it.

Grammar::

    expr := word                          target pattern: //pkg/..., //pkg:all, //pkg:name, :name
          | "quoted word" | 'quoted word' (needed for +, =, ',', spaces, keywords, function names)
          | $name                         a let-bound variable
          | let name = expr in expr       the body extends as far right as possible
          | ( expr )
          | expr union expr | expr + expr
          | expr intersect expr | expr ^ expr
          | expr except expr | expr - expr      (all left-associative, equal precedence)
          | deps(expr[, depth])           expr and its transitive deps; depth 0 = expr, 1 = + direct deps
          | rdeps(universe, expr[, depth])    targets in deps(universe) depending on expr
          | somepath(from, to) | allpaths(from, to)
          | kind(regex, expr)             regex searched in "<kind> rule"
          | attr(name, regex, expr)       regex searched in the attribute's text ([a, b] for lists)
          | filter(regex, expr)           regex searched in the label
          | labels(attr_name, expr)       the targets an attribute names
          | some(expr[, count])
          | built(expr) | stale(expr) | missing(expr) | failed(expr) | running(expr)

Results are ordered dependencies first (topologically), ties by label.
"""

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
    "FUNCTIONS",
    "OUTPUT_FORMATS",
    "STATES",
    "Query",
    "QueryError",
    "QueryUniverse",
    "check_output",
    "evaluate",
    "format_result",
    "parse",
    "run_query",
]


def run_query(expr: str, universe: QueryUniverse, output: str = "label") -> str:
    """Parse, evaluate and format ``expr`` (checking ``output`` first, before any evaluation work)."""
    check_output(output)
    query = parse(expr)
    return format_result(evaluate(query, universe), universe, output)
