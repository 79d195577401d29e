"""Progress a running step reports about itself (e.g. a tokenize's shards done / total, tokens per second).
A step calls ``report(detail, **data)``; ``StepJob.run`` (or its Ray task) sets a ``contextvars`` reporter
(``reporting``) emitting a ``progress`` event. Where none is set, ``report`` returns False: log it instead."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Reporter = Callable[[str, dict[str, Any]], None]
_reporter: contextvars.ContextVar[Reporter | None] = contextvars.ContextVar("marinbuild_step_progress", default=None)


def report(detail: str, **data: Any) -> bool:
    """Report the running step's progress; False if nothing listens here."""
    reporter = _reporter.get()
    if reporter is None:
        return False
    reporter(detail, data)
    return True


@contextmanager
def reporting(reporter: Reporter) -> Iterator[None]:
    """Within this block, ``report`` calls ``reporter(detail, data)``."""
    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)
