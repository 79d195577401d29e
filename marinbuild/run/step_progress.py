"""Progress a running step reports about itself (e.g. a tokenize's shards done / total, tokens per second).

A step's function calls ``report(detail, **data)``; while the step runs on the local backend,
``StepJob.run`` has set a reporter (``reporting``) that emits a ``progress`` event for that step
(``detail`` is the short text displays show, ``data`` the numbers, both in the build-event file).
Where no reporter is set (a step's Ray task, a plain call), ``report`` does nothing and returns
False, so the step can say the same thing in its log instead. The reporter is a ``contextvars``
one: each thread of the local backend, so each step, has its own.
"""

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
