"""Query lexer: turns query text into tokens (words, punctuation, operators) with positions.

As Bazel's: unquoted words are runs of ``A-Za-z0-9*/@.-_:$~[]#%`` not starting with ``-``; anything else needs a quoted
word (no escapes). Keywords are recognised by the parser among unquoted words only."""

from __future__ import annotations

import string
from dataclasses import dataclass
from enum import Enum

from marinbuild.query.errors import QueryError

WORD_CHARS = frozenset(string.ascii_letters + string.digits + "*/@.-_:$~[]#%")
_PUNCT = {"(": "LPAREN", ")": "RPAREN", ",": "COMMA", "=": "EQUALS", "+": "PLUS", "-": "MINUS", "^": "CARET"}


class Tok(Enum):
    WORD = "word"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    EQUALS = "="
    PLUS = "+"
    MINUS = "-"
    CARET = "^"
    EOF = "end of query"


@dataclass(frozen=True, slots=True)
class Token:
    """One token: its kind, its text (a word's value without quotes), offset, and quotedness."""

    kind: Tok
    text: str
    pos: int
    quoted: bool = False

    def describe(self) -> str:
        """How an error message names this token."""
        if self.kind is Tok.EOF:
            return "end of query"
        if self.kind is Tok.WORD:
            return f"word {self.text!r}" if not self.quoted else f"quoted word {self.text!r}"
        return f"'{self.text}'"


def tokenize(source: str) -> list[Token]:
    """The tokens of ``source``, ending with an EOF token; raises ``QueryError`` on bad input."""
    tokens: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        if c.isspace():
            i += 1
        elif c in _PUNCT:
            tokens.append(Token(Tok[_PUNCT[c]], c, i))
            i += 1
        elif c in "\"'":
            end = source.find(c, i + 1)
            if end < 0:
                raise QueryError(f"unclosed quote: missing closing {c}", i, source)
            tokens.append(Token(Tok.WORD, source[i + 1 : end], i, quoted=True))
            i = end + 1
        elif c in WORD_CHARS:
            start = i
            while i < n and source[i] in WORD_CHARS:
                i += 1
            tokens.append(Token(Tok.WORD, source[start:i], start))
        else:
            raise QueryError(f"unexpected character {c!r}; quote words that contain it", i, source)
    tokens.append(Token(Tok.EOF, "", n))
    return tokens
