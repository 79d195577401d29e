"""Query syntax tree: the node types the parser builds.

Every node keeps ``pos``, the offset in the query text that errors about it point at."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Operator spellings -> canonical operator name.
OPERATORS = {
    "union": "union",
    "+": "union",
    "intersect": "intersect",
    "^": "intersect",
    "except": "except",
    "-": "except",
}
KEYWORDS = frozenset({"let", "in", "union", "intersect", "except"})


@dataclass(frozen=True)
class Target:
    """A target pattern word, expanded by the universe's ``expand_pattern``."""

    word: str
    pos: int


@dataclass(frozen=True)
class Var:
    """``$name``: the value bound by an enclosing ``let``."""

    name: str
    pos: int


@dataclass(frozen=True)
class Let:
    """``let name = value in body``."""

    name: str
    value: Expr
    body: Expr
    pos: int


@dataclass(frozen=True)
class BinOp:
    """``left op right`` with ``op`` one of ``union``, ``intersect``, ``except``; ``pos`` is the operator's."""

    op: str
    left: Expr
    right: Expr
    pos: int


@dataclass(frozen=True)
class Call:
    """``name(args...)``: each argument is an ``Expr``, a word, a compiled regex, or an int."""

    name: str
    args: tuple[Expr | str | re.Pattern[str] | int, ...]
    pos: int


@dataclass(frozen=True)
class SetOf:
    """``set(a b c)``: the union of the target patterns, as Bazel's ``set()``; ``set()`` is the empty set."""

    words: tuple[Target, ...]
    pos: int


Expr = Target | Var | Let | BinOp | Call | SetOf


@dataclass(frozen=True)
class Query:
    """A parsed query: its text (for error positions) and syntax tree."""

    source: str
    root: Expr
