"""The local backend: steps run in threads of this process (nothing to start).

``max_concurrent=None`` means every ready step runs at once, as in Marin. Running hundreds
of *short* steps on hundreds of threads, though, spends more time handing Python's GIL
around than running them. So a step starts on one of a few *fast slots* (``fast_slots``,
default half the CPUs, at least one); a step still running after ``promote_after`` seconds
is promoted to long-running, gives its slot up and keeps its own thread, and the next ready
step starts. Short steps therefore run back to back on few threads, while long ones
(downloads, training launches, waits on remote jobs) all end up running at once, each
started at most ``promote_after`` after a slot could have been given to it. Promotion is a
timer (a condition wait until the earliest deadline), never a poll.

Threads are daemons and reused, so Ctrl-C never waits on a running step. A worker that
finishes a step takes the next waiting one itself, without a hand-off to another thread.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections import deque
from typing import Any

from marinbuild.run.backend import Completion
from marinbuild.run.step_job import StepJob

MAX_THREADS = 4096
"""A ceiling on threads when no concurrency limit is given, far above any real step count at once."""

PROMOTE_AFTER = 0.05
"""Seconds a step may hold a fast slot before it counts as long-running and frees the slot."""


def default_fast_slots() -> int:
    """``$MARINBUILD_LOCAL_SLOTS``, else half the CPUs (at least one)."""
    configured = os.environ.get("MARINBUILD_LOCAL_SLOTS")
    if configured:
        try:
            value = int(configured)
        except ValueError:
            raise ValueError(f"MARINBUILD_LOCAL_SLOTS must be a positive integer, got {configured!r}") from None
        if value < 1:
            raise ValueError(f"MARINBUILD_LOCAL_SLOTS must be a positive integer, got {configured!r}")
        return value
    return max(1, (os.cpu_count() or 2) // 2)


_Item = tuple[StepJob, Completion, object]


class LocalBackend:
    name = "local"

    def __init__(
        self, max_workers: int | None = None, *, fast_slots: int | None = None, promote_after: float = PROMOTE_AFTER
    ):
        self.max_workers = max_workers or MAX_THREADS
        self.fast_slots = fast_slots or default_fast_slots()
        self.promote_after = promote_after
        self._cond = threading.Condition()
        self._waiting: deque[tuple[StepJob, Completion]] = deque()
        self._fast: dict[object, float] = {}  # running step token -> when it stops holding a slot
        self._running = 0
        self._finishing = 0  # workers reporting a completion: each looks for a waiting step right after
        self._idle = 0
        self._threads = 0
        self._handoff: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._promoter: threading.Thread | None = None
        self._promoter_idle = False
        self._closed = False

    # -- scheduling --------------------------------------------------------------------------
    def submit(self, job: StepJob, done: Completion) -> None:
        with self._cond:
            self._waiting.append((job, done))
            self._start_waiting_locked()

    def _can_start_locked(self) -> bool:
        return bool(self._waiting) and len(self._fast) < self.fast_slots and self._running < self.max_workers

    def _claim_locked(self) -> _Item:
        job, done = self._waiting.popleft()
        token = object()
        self._fast[token] = time.monotonic() + self.promote_after
        self._running += 1
        return job, done, token

    def _start_waiting_locked(self) -> None:
        """Start waiting steps on free slots (idle threads first); wake the promoter if some must wait."""
        while self._can_start_locked():
            item = self._claim_locked()
            if self._idle:
                self._idle -= 1
                self._handoff.put(item)
            else:
                self._threads += 1
                threading.Thread(
                    target=self._worker, args=(item,), name=f"marinbuild-step-{self._threads}", daemon=True
                ).start()
        if self._waiting and self._fast and not self._finishing:
            # (a worker reporting a completion takes the next waiting step itself, then calls this again)
            if self._promoter is None:
                self._promoter = threading.Thread(target=self._promote_loop, name="marinbuild-promoter", daemon=True)
                self._promoter.start()
            elif self._promoter_idle:
                self._cond.notify()

    def _promote_loop(self) -> None:
        """While steps wait for a slot: at each slot holder's deadline, promote it and start the next step.

        Only this thread waits on ``_cond`` (workers wait on the hand-off queue), so ``notify`` wakes it alone,
        and only when it sleeps with nothing to time: new slot holders have later deadlines than the one it waits for.
        """
        with self._cond:
            while not self._closed:
                if not (self._waiting and self._fast):
                    self._promoter_idle = True
                    self._cond.wait()
                    self._promoter_idle = False
                    continue
                now = time.monotonic()
                expired = [token for token, deadline in self._fast.items() if deadline <= now]
                if expired:
                    for token in expired:
                        del self._fast[token]
                    self._start_waiting_locked()
                    continue
                self._cond.wait(min(self._fast.values()) - now)

    def _worker(self, item: _Item | None) -> None:
        while item is not None:
            job, done, token = item
            try:
                outcome, error = job.run_here(), None
            except BaseException as exc:
                outcome, error = None, exc
            with self._cond:
                self._finishing += 1
            try:
                done(job, outcome, error)  # may submit the steps this one unblocked
            finally:
                with self._cond:
                    self._finishing -= 1
                    self._fast.pop(token, None)
                    self._running -= 1
                    closed = self._closed
                    if not closed:
                        # the next waiting step runs on this thread: no hand-off
                        item = self._claim_locked() if self._can_start_locked() else None
                        self._start_waiting_locked()
                        if item is None:
                            self._idle += 1
            if closed:
                return
            if item is None:
                item = self._handoff.get()

    def shutdown(self, cancel: bool = False) -> None:
        with self._cond:
            self._closed = True
            self._waiting.clear()
            idle = self._idle
            self._idle = 0
            self._cond.notify_all()
        for _ in range(idle):
            self._handoff.put(None)

    def check_resources(self, resources: Any) -> str | None:
        """Refuse TPUs and GPUs this machine does not have (see ``marinbuild.run.resources.check_local``)."""
        from marinbuild.run.resources import check_local

        try:
            return check_local(resources)
        except (TypeError, ValueError) as exc:
            return str(exc)
