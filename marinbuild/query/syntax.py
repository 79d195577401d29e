"""Query syntax tree: the node types the parser builds, and printing them back as query text.

Every node keeps ``pos``, the offset in the query text that errors about it point at. ``str(node)`` is canonical query
text that parses back to the same tree: word operators, every operation parenthesised, words quoted only when needed."""

from __future__ import annotations

import re
from dataclasses import dataclass

from marinbuild.query.functions import FUNCTIONS
from marinbuild.query.lexer import WORD_CHARS

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


def quote_word(word: str) -> str:
    """``word`` as query text: bare when the lexer would read it back as this word, else quoted."""
    bare = (
        word
        and all(c in WORD_CHARS for c in word)
        and not word.startswith(("-", "$"))
        and word not in KEYWORDS
        and word not in FUNCTIONS
        and word != "set"
    )
    if bare:
        return word
    return f"'{word}'" if '"' in word else f'"{word}"'


@dataclass(frozen=True)
class Target:
    """A target pattern word, expanded by the universe's ``expand_pattern``."""

    word: str
    pos: int

    def __str__(self) -> str:
        return quote_word(self.word)


@dataclass(frozen=True)
class Var:
    """``$name``: the value bound by an enclosing ``let``."""

    name: str
    pos: int

    def __str__(self) -> str:
        return f"${self.name}"


@dataclass(frozen=True)
class Let:
    """``let name = value in body``."""

    name: str
    value: Expr
    body: Expr
    pos: int

    def __str__(self) -> str:
        return f"(let {self.name} = {self.value} in {self.body})"


@dataclass(frozen=True)
class BinOp:
    """``left op right`` with ``op`` one of ``union``, ``intersect``, ``except``; ``pos`` is the operator's."""

    op: str
    left: Expr
    right: Expr
    pos: int

    def __str__(self) -> str:
        # Operator chains are left-deep and can be long: print them without recursing on the spine.
        rights: list[BinOp] = []
        node: Expr = self
        while isinstance(node, BinOp):
            rights.append(node)
            node = node.left
        text = str(node)
        for op in reversed(rights):
            text = f"({text} {op.op} {op.right})"
        return text


@dataclass(frozen=True)
class Call:
    """``name(args...)``: each argument is an ``Expr``, a word, a compiled regex, or an int."""

    name: str
    args: tuple[Expr | str | re.Pattern[str] | int, ...]
    pos: int

    def __str__(self) -> str:
        parts = []
        for arg in self.args:
            if isinstance(arg, re.Pattern):
                parts.append(quote_word(arg.pattern))
            elif isinstance(arg, str):
                parts.append(quote_word(arg))
            else:
                parts.append(str(arg))
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class SetOf:
    """``set(a b c)``: the union of the target patterns, as Bazel's ``set()``; ``set()`` is the empty set."""

    words: tuple[Target, ...]
    pos: int

    def __str__(self) -> str:
        return f"set({' '.join(str(w) for w in self.words)})"


Expr = Target | Var | Let | BinOp | Call | SetOf


@dataclass(frozen=True)
class Query:
    """A parsed query: its text (for error positions) and syntax tree."""

    source: str
    root: Expr

    def __str__(self) -> str:
        return str(self.root)
