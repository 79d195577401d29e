"""Query errors: ``QueryError`` says what is wrong with a query and where (line and column); ``did_you_mean``
suggests a name for unknown functions, variables and output formats."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class QueryError(Exception):
    """A bad query or output format; ``str()``: ``query:LINE:COLUMN: message`` from ``position`` in ``source``."""

    def __init__(self, message: str, position: int | None = None, source: str = "") -> None:
        super().__init__(message, position)
        self.message = message
        self.position = position
        self.source = source

    @property
    def line(self) -> int | None:
        return None if self.position is None else self.source.count("\n", 0, self.position) + 1

    @property
    def column(self) -> int | None:
        return None if self.position is None else self.position - (self.source.rfind("\n", 0, self.position) + 1) + 1

    def __str__(self) -> str:
        return f"query: {self.message}" if self.position is None else f"query:{self.line}:{self.column}: {self.message}"


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``word``, or ``""``."""
    close = difflib.get_close_matches(word, sorted(set(choices)), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""
