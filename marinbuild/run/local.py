"""The local backend: each step runs on a daemon thread of its own in this process (Ctrl-C waits on none).
``max_concurrent`` caps how many run at once (None: all, as in Marin) by a semaphore taken on the step's thread,
so ``submit`` returns at once; after ``shutdown`` a step still waiting for it does not start."""

from __future__ import annotations

import threading
from typing import Any

from marinbuild.run.backend import Completion
from marinbuild.run.resources import check_local
from marinbuild.run.step_job import StepJob


class LocalBackend:
    name = "local"

    def __init__(self, max_concurrent: int | None = None):
        self._cap = threading.BoundedSemaphore(max_concurrent) if max_concurrent else None
        self._closed = False

    def submit(self, job: StepJob, done: Completion) -> None:
        threading.Thread(target=self._run, args=(job, done), name=f"marinbuild-step {job.name}", daemon=True).start()

    def _run(self, job: StepJob, done: Completion) -> None:
        if self._cap is not None:
            self._cap.acquire()
        try:
            if self._closed:
                return
            try:
                outcome, error = job.run_here(), None
            except BaseException as exc:
                outcome, error = None, exc
        finally:
            if self._cap is not None:
                self._cap.release()
        done(job, outcome, error)

    def shutdown(self, cancel: bool = False) -> None:
        self._closed = True

    def check_resources(self, resources: Any) -> str | None:
        """Refuse TPUs and GPUs this machine does not have (``run.resources.check_local``)."""
        try:
            return check_local(resources)
        except (TypeError, ValueError) as exc:
            return str(exc)
