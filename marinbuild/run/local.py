"""The local backend: steps run in threads of this process (nothing to start).

Threads are daemons and made on demand (an idle one is reused), so ``max_concurrent=None``
really runs every ready step at once, and Ctrl-C never waits on a running step.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from marinbuild.run.backend import Completion
from marinbuild.run.step_job import StepJob

MAX_THREADS = 4096
"""A ceiling on threads when no concurrency limit is given, far above any real step count at once."""


class LocalBackend:
    name = "local"

    def __init__(self, max_workers: int | None = None):
        self.max_workers = max_workers or MAX_THREADS
        self._work: queue.SimpleQueue[tuple[StepJob, Completion] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, job: StepJob, done: Completion) -> None:
        with self._lock:
            spawn = self._idle == 0 and self._threads < self.max_workers
            if spawn:
                self._threads += 1
            else:
                self._idle -= 1
        self._work.put((job, done))
        if spawn:
            threading.Thread(target=self._worker, name=f"marinbuild-step-{self._threads}", daemon=True).start()

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            job, done = item
            try:
                outcome = job.run_here()
            except BaseException as exc:
                done(job, None, exc)
            else:
                done(job, outcome, None)
            with self._lock:
                self._idle += 1

    def shutdown(self, cancel: bool = False) -> None:
        with self._lock:
            n = self._threads
        for _ in range(n):
            self._work.put(None)

    def check_resources(self, resources: Any) -> str | None:
        """Refuse TPUs and GPUs this machine does not have (see ``marinbuild.resources.check_local``)."""
        from marinbuild.resources import check_local

        try:
            return check_local(resources)
        except (TypeError, ValueError) as exc:
            return str(exc)
