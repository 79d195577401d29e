"""Progress reports of steps running in Ray tasks, relayed to the driver's events.

A step's function calls ``marinbuild.run.step_progress.report``. In a step's Ray task the reporter (``TaskReporter``,
set by ``ray_task.run_under_lease``) sends each report to the driver's relay: a small named actor (``_RelayActor``, no
CPUs, named after the driver's worker id, in the job's namespace), looked up the first time the step reports, so steps
that never report cost nothing. On the driver, ``ProgressRelay`` creates that actor once a launched step has run
``START_AFTER`` seconds (an actor is a Ray worker process: a build whose steps all end sooner starts none), and, while
launched steps run, one thread long-polls it (``take``) and emits each report as a ``progress`` event on the bus of the
step's job. A report that cannot be sent (no relay yet, or the task was not launched by a marinbuild driver) is dropped,
but the step's last one its task returns to the driver, sent or not (the relay's thread ends with the step, perhaps
before taking it): progress is a convenience, never a reason for a step to fail."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from marinbuild.run import events as ev

logger = logging.getLogger("marinbuild")

POLL = 1.0
"""Seconds the driver's ``take`` waits for a report before asking again (and seeing whether it should stop)."""
START_AFTER = 10.0
"""Seconds the oldest launched step runs before the relay actor is made (reports sent before it exists are lost)."""


def relay_name(holder: str) -> str:
    return f"marinbuild-progress-{holder}"


class _RelayActor:
    """A Ray actor: reports in, batches of them out."""

    def __init__(self) -> None:
        import asyncio

        self._items: list[tuple[str, str, str, dict[str, Any]]] = []
        self._arrived = asyncio.Event()  # bound to the actor's event loop when first awaited

    async def report(self, item: tuple[str, str, str, dict[str, Any]]) -> None:
        self._items.append(item)
        self._arrived.set()

    async def wake(self) -> None:
        self._arrived.set()

    async def take(self, timeout: float) -> list[tuple[str, str, str, dict[str, Any]]]:
        import asyncio

        if not self._items:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout)
        items, self._items = self._items, []
        self._arrived.clear()
        return items


class ProgressRelay:
    """The driver's end: the relay actor, and a thread emitting its reports while launched steps run.

    The thread runs only while some watched step runs (``watch`` at its launch, ``unwatch`` when it
    ends): it makes the actor once the oldest of them has run ``START_AFTER`` seconds, and when the
    last one ends it is woken and ends; ``stop`` (the backend's shutdown) also waits for it, so no
    thread of ours is inside a Ray call when the build, and perhaps the process and Ray, end."""

    def __init__(self, holder: str):
        import ray

        self._ray = ray
        self._holder = holder
        self._changed = threading.Condition()
        self._buses: dict[str, tuple[ev.EventBus, float]] = {}
        """The watched steps' buses and launch times, oldest first."""
        self._thread: threading.Thread | None = None
        self._actor: Any = None

    def watch(self, output_path: str, bus: ev.EventBus) -> None:
        """Reports of the step at ``output_path`` go to ``bus`` until ``unwatch``."""
        with self._changed:
            self._buses[output_path] = (bus, time.monotonic())
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="marinbuild-ray-progress", daemon=True)
                self._thread.start()

    def unwatch(self, output_path: str) -> None:
        """The step ended; after the last one the thread is woken and ends (``stop`` also waits for it)."""
        with self._changed:
            self._buses.pop(output_path, None)
            if self._buses or self._thread is None:
                return
        self._wake()

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
            actor = self._actor
        try:
            if actor is not None:
                actor.wake.remote()
        except Exception:
            logger.debug("could not wake the progress relay", exc_info=True)

    def stop(self) -> None:
        with self._changed:
            self._buses.clear()
            thread = self._thread
        if thread is not None:
            self._wake()
            if thread is not threading.current_thread():
                thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            with self._changed:
                if not self._buses:
                    self._thread = None
                    return
                actor = self._actor
                wait = (
                    0.0 if actor is not None else next(iter(self._buses.values()))[1] + START_AFTER - time.monotonic()
                )
                if wait > 0:
                    self._changed.wait(wait)
                    continue
            try:
                if actor is None:
                    actor = self._actor = (
                        self._ray.remote(_RelayActor)
                        .options(name=relay_name(self._holder), num_cpus=0, max_restarts=0, get_if_exists=True)
                        .remote()
                    )
                items = self._ray.get(actor.take.remote(POLL))
            except BaseException:  # Ray is gone or the actor died (Ray raises SystemExit after its shutdown)
                logger.debug("the progress relay stopped", exc_info=True)
                with self._changed:
                    self._thread = None
                return
            for step, output_path, detail, data in items:
                watched = self._buses.get(output_path)
                if watched is not None:
                    watched[0].emit(ev.PROGRESS, step=step, output_path=output_path, detail=detail, data=data)


class TaskReporter:
    """In a step's task: sends each report to the relay of the driver ``holder`` (looked up until found). The last
    report is kept (``last``): the task returns it and the driver emits it, so a step's final state reaches the
    events even when the step ended before the relay was up, or before the relay's reports were taken."""

    def __init__(self, holder: str, step: str, output_path: str) -> None:
        self.holder, self.step, self.output_path = holder, step, output_path
        self.actor: Any = None
        self.last: tuple[str, dict[str, Any]] | None = None

    def __call__(self, detail: str, data: dict[str, Any]) -> None:
        self.last = (detail, data)
        try:
            if self.actor is None:
                import ray

                self.actor = ray.get_actor(relay_name(self.holder))
            self.actor.report.remote((self.step, self.output_path, detail, data))
        except Exception:
            logger.debug("could not send a progress report of %s", self.step, exc_info=True)
