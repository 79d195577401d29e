"""The scheduler: hands ready steps to a backend and reacts to completions as they arrive.

No polling: backends report completions through a callback, handled on the reporting thread. A failed step's consumers
are marked dependency-failed at once; independent steps go on unless ``keep_going`` is False. A step's ``StepJob`` is
made when it starts and dropped when done, so a run holds the jobs of the steps in flight only. ``holds``
(``run/handoff.py``) may keep a ready step back (no job, no slot) until it releases it; it is told of every step that
ends."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from marinbuild.run import events as ev
from marinbuild.run.backend import Backend
from marinbuild.run.step_job import RAN, JobOutcome, StepJob

K = TypeVar("K", bound=Hashable)  # what names a step: an ExecutorStep for the engine


@dataclass
class Outcome(Generic[K]):
    """What a build did: steps ran, found built, failed, stopped by a failed dependency (step -> it), or skipped."""

    ran: list[K] = field(default_factory=list)
    cached: list[K] = field(default_factory=list)
    failed: dict[K, BaseException] = field(default_factory=dict)
    dep_failed: dict[K, K] = field(default_factory=dict)
    skipped: list[K] = field(default_factory=list)


class Holds(Protocol[K]):
    def hold(self, key: K, release: Callable[[K, BaseException | None], None]) -> bool:
        """True to keep the ready ``key`` back until ``release(key, None)`` (start it) or ``release(key, error)``."""

    def ended(self, key: K, ok: bool) -> None:
        """``key`` ended: succeeded (``ok``), or failed or will not run."""

    def close(self) -> None:
        """The schedule is over."""


class _Run(Generic[K]):
    """The state of one ``schedule`` call; every change happens under ``lock``."""

    def __init__(
        self,
        order: list[K],
        deps: dict[K, list[K]],
        job_for: Callable[[K], StepJob],
        describe: Callable[[K], tuple[str, str]],
        backend: Backend,
        bus: ev.EventBus,
        max_concurrent: int | None,
        keep_going: bool,
        holds: Holds[K] | None,
    ):
        self.order, self.job_for, self.describe, self.backend, self.bus = order, job_for, describe, backend, bus
        self.holds = holds
        self.held: set[K] = set()  # Ready steps ``holds`` keeps back; ``released``: those it let go.
        self.released: set[K] = set()
        self.max_concurrent, self.keep_going = max_concurrent, keep_going
        self.outcome: Outcome[K] = Outcome()
        keys = set(order)
        self.waiting: dict[K, int] = {}
        """How many of its dependencies each step still waits for (a count, not a set: one per step of the run)."""
        self.consumers: dict[K, list[K]] = {k: [] for k in order}
        for k in order:
            needed = {d for d in deps[k] if d in keys}
            self.waiting[k] = len(needed)
            for d in needed:
                self.consumers[d].append(k)
        self.ready = deque(k for k in order if not self.waiting[k])
        self.key_of: dict[int, K] = {}  # The key of each job in flight, by the job's id.
        self.in_flight: dict[K, StepJob] = {}
        self.finished: set[K] = set()
        self.stopping = False
        self.lock = threading.Lock()
        self.all_done = threading.Event()
        self.interrupt: BaseException | None = None
        """A KeyboardInterrupt a job reported, or an error of the scheduler's own, for the calling thread."""

    def take_ready_locked(self) -> list[StepJob]:
        """Jobs to submit now (marked in flight); sets ``all_done`` when nothing runs and nothing can start."""
        started = []
        while (
            self.ready
            and not self.stopping
            and (self.max_concurrent is None or len(self.in_flight) < self.max_concurrent)
        ):
            key = self.ready.popleft()
            if self.holds is not None and key not in self.released and self.holds.hold(key, self.release):
                self.held.add(key)
                continue
            job = self.job_for(key)
            self.in_flight[key] = job
            self.key_of[id(job)] = key
            started.append(job)
        if not self.in_flight and (not self.held or self.stopping):
            self.all_done.set()
        return started

    def complete_locked(self, job: StepJob, result: JobOutcome | None, error: BaseException | None) -> None:
        key = self.key_of.pop(id(job))
        self.in_flight.pop(key, None)
        self.finished.add(key)
        if error is None:
            if result == RAN:
                self.outcome.ran.append(key)
                self.bus.emit(ev.SUCCEEDED, step=job.name, output_path=job.output_path)
            else:
                self.outcome.cached.append(key)
                self.bus.emit(ev.CACHED, step=job.name, output_path=job.output_path, detail="built by another runner")
            if self.holds is not None:
                self.holds.ended(key, True)
            for consumer in self.consumers[key]:
                self.waiting[consumer] -= 1
                if not self.waiting[consumer] and consumer not in self.outcome.dep_failed:
                    self.ready.append(consumer)
            return
        if isinstance(error, KeyboardInterrupt):
            self.interrupt = error
            self.stopping = True
            self.all_done.set()
            return
        self.fail_locked(key, error)

    def fail_locked(self, key: K, error: BaseException) -> None:
        self.finished.add(key)
        self.outcome.failed[key] = error
        name, output_path = self.describe(key)
        self.bus.emit(ev.FAILED, step=name, output_path=output_path, error=error)
        not_run = _mark_dep_failed(key, self.consumers, self.describe, self.outcome, self.bus)
        if self.holds is not None:
            for ended in (key, *not_run):
                self.holds.ended(ended, False)
        if not self.keep_going:
            self.stopping = True

    def release_locked(self, key: K, error: BaseException | None) -> None:
        """``holds`` lets ``key`` go: to start (``error`` None) or to fail."""
        self.held.discard(key)
        if error is None:
            self.released.add(key)
            self.ready.appendleft(key)
        elif not self.stopping:
            self.fail_locked(key, error)

    def submit(self, jobs: list[StepJob]) -> None:
        for job in jobs:
            self.backend.submit(job, self.done)

    def done(self, job: StepJob, result: JobOutcome | None, error: BaseException | None) -> None:
        """A backend's completion callback, on whatever thread the backend reports from."""
        self._then(self.complete_locked, job, result, error)

    def release(self, key: K, error: BaseException | None) -> None:
        """``holds``' release, on its own thread."""
        self._then(self.release_locked, key, error)

    def _then(self, change: Callable[..., None], *args: Any) -> None:
        """``change(*args)`` under the lock, then submit what became ready."""
        try:
            with self.lock:
                change(*args)
                started = [] if self.interrupt is not None else self.take_ready_locked()
            self.submit(started)
        except BaseException as exc:  # never lose the build in another thread: the caller re-raises it
            with self.lock:
                self.interrupt = self.interrupt or exc
                self.all_done.set()


def schedule(
    order: list[K],
    deps: dict[K, list[K]],
    job_for: Callable[[K], StepJob],
    describe: Callable[[K], tuple[str, str]],
    backend: Backend,
    bus: ev.EventBus,
    *,
    max_concurrent: int | None,
    keep_going: bool,
    cancel: threading.Event,
    holds: Holds[K] | None = None,
) -> Outcome[K]:
    """Run the steps ``order`` lists (in dependency order), each after its ``deps`` among them succeeded:
    ``job_for(key)`` makes a step's job as it starts; ``describe(key)`` is its (name, output path) for a step that never
    starts. Completions are handled, and the next ready steps submitted, on the reporting thread; the calling thread
    only waits for the end (or Ctrl-C)."""
    run = _Run(order, deps, job_for, describe, backend, bus, max_concurrent, keep_going, holds)
    try:
        with run.lock:
            started = run.take_ready_locked()
        run.submit(started)
        run.all_done.wait()
        if run.interrupt is not None:
            raise run.interrupt
    except KeyboardInterrupt:
        cancel.set()
        backend.shutdown(cancel=True)
        with run.lock:
            run.stopping = True
            in_flight = list(run.in_flight.values())
        for job in in_flight:
            job.abandon()
        raise
    finally:
        if holds is not None:
            holds.close()
    outcome = run.outcome
    for key in order:
        if key not in run.finished and key not in outcome.dep_failed:
            outcome.skipped.append(key)
            name, output_path = describe(key)
            bus.emit(
                ev.SKIPPED, step=name, output_path=output_path, detail="not started: the build stopped after a failure"
            )
    return outcome


def _mark_dep_failed(
    failed: K,
    consumers: dict[K, list[K]],
    describe: Callable[[K], tuple[str, str]],
    outcome: Outcome[K],
    bus: ev.EventBus,
) -> list[K]:
    """Mark the consumers of ``failed`` (transitively) dependency-failed; the keys newly marked."""
    marked: list[K] = []
    stack = list(consumers[failed])
    failed_name = describe(failed)[0]
    while stack:
        key = stack.pop()
        if key in outcome.dep_failed:
            continue
        outcome.dep_failed[key] = failed
        marked.append(key)
        name, output_path = describe(key)
        bus.emit(ev.DEP_FAILED, step=name, output_path=output_path, detail=f"dependency {failed_name} failed")
        stack.extend(consumers[key])
    return marked
