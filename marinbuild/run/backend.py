"""The backend interface: somewhere to run step jobs (``run/backends.py`` lists them). ``submit`` returns at once;
``done`` is called exactly once per job, from any thread, with its outcome or the error that ended it.
``check_resources`` is asked before anything runs, so an unsatisfiable build refuses at once; ``resources`` is ``Any``:
the shapes users write (a dict, Marin's ``ResourceConfig``, a ``Resources``), read by ``normalize``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from marinbuild.run.step_job import JobOutcome, StepJob

Completion = Callable[[StepJob, JobOutcome | None, BaseException | None], None]
"""Called once per job: (job, its outcome or None, the error or None)."""


class Backend(Protocol):
    name: str

    def submit(self, job: StepJob, done: Completion) -> None: ...

    def shutdown(self, cancel: bool = False) -> None:
        """Stop accepting work; with ``cancel``, stop what is running if the backend can."""

    def check_resources(self, resources: Any) -> str | None: ...  # why it cannot satisfy them (None: it can)
