"""The scheduler: hands ready steps to a backend and reacts to completions as they arrive.

No polling: backends report completions into a queue the scheduler blocks on. A failed
step's consumers are marked dependency-failed at once; independent steps go on unless
``keep_going`` is False, in which case nothing new starts after the first failure.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Hashable

from marinbuild.run import events as ev
from marinbuild.run.backend import Backend
from marinbuild.run.outcome import Outcome
from marinbuild.run.step_job import RAN, StepJob


def schedule(
    order: list[Hashable],
    deps: dict[Hashable, list[Hashable]],
    jobs: dict[Hashable, StepJob],
    backend: Backend,
    bus: ev.EventBus,
    *,
    max_concurrent: int | None,
    keep_going: bool,
    cancel: threading.Event,
) -> Outcome:
    """Run ``jobs`` (keys in dependency ``order``), each after its ``deps`` among them succeeded."""
    outcome = Outcome()
    waiting_on = {k: {d for d in deps[k] if d in jobs} for k in order}
    consumers: dict[Hashable, list[Hashable]] = {k: [] for k in order}
    for k in order:
        for d in waiting_on[k]:
            consumers[d].append(k)
    ready = deque(k for k in order if not waiting_on[k])
    key_of = {id(jobs[k]): k for k in order}
    completions: queue.SimpleQueue[tuple[StepJob, str | None, BaseException | None]] = queue.SimpleQueue()
    running = 0
    in_flight: dict[Hashable, StepJob] = {}
    stopping = False
    finished: set[Hashable] = set()

    def done(job: StepJob, result: str | None, error: BaseException | None) -> None:
        completions.put((job, result, error))

    try:
        while True:
            while ready and not stopping and (max_concurrent is None or running < max_concurrent):
                key = ready.popleft()
                in_flight[key] = jobs[key]
                backend.submit(jobs[key], done)
                running += 1
            if running == 0:
                break
            job, result, error = completions.get()
            running -= 1
            key = key_of[id(job)]
            in_flight.pop(key, None)
            finished.add(key)
            if error is None:
                if result == RAN:
                    outcome.ran.append(key)
                    bus.emit(ev.SUCCEEDED, step=job.name, output_path=job.output_path)
                else:
                    outcome.cached.append(key)
                    bus.emit(ev.CACHED, step=job.name, output_path=job.output_path, detail="built by another runner")
                for consumer in consumers[key]:
                    waiting_on[consumer].discard(key)
                    if not waiting_on[consumer] and consumer not in outcome.dep_failed:
                        ready.append(consumer)
                continue
            if isinstance(error, KeyboardInterrupt):
                raise error
            outcome.failed[key] = error
            bus.emit(ev.FAILED, step=job.name, output_path=job.output_path, error=error)
            _mark_dep_failed(key, consumers, jobs, outcome, bus)
            if not keep_going:
                stopping = True
    except KeyboardInterrupt:
        cancel.set()
        backend.shutdown(cancel=True)
        for job in in_flight.values():
            job.abandon()
        outcome.interrupted = True
        raise
    for key in order:
        if key not in finished and key not in outcome.dep_failed:
            outcome.skipped.append(key)
            bus.emit(ev.SKIPPED, step=jobs[key].name, output_path=jobs[key].output_path,
                     detail="not started: the build stopped after a failure")
    return outcome


def _mark_dep_failed(failed: Hashable, consumers: dict[Hashable, list[Hashable]], jobs: dict[Hashable, StepJob],
                     outcome: Outcome, bus: ev.EventBus) -> None:
    stack = list(consumers[failed])
    while stack:
        key = stack.pop()
        if key in outcome.dep_failed:
            continue
        outcome.dep_failed[key] = failed
        bus.emit(ev.DEP_FAILED, step=jobs[key].name, output_path=jobs[key].output_path,
                 detail=f"dependency {jobs[failed].name} failed")
        stack.extend(consumers[key])
