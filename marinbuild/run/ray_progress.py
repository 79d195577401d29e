"""Progress reports of steps running in Ray tasks, relayed to the driver's events.

A step's function calls ``marinbuild.run.step_progress.report``. In a step's Ray task the reporter
(``task_reporter``, set by ``ray_task.run_under_lease``) sends each report to the driver's relay:
a small named actor (``_RelayActor``, no CPUs, named after the driver's worker id, in the job's
namespace), looked up the first time the step reports, so steps that never report cost nothing.
On the driver, ``ProgressRelay`` creates that actor when the first step is launched, and, while
launched steps run, one thread long-polls it (``take``) and emits each report as a ``progress``
event on the bus of the step's job.
A report that cannot be sent (no relay: the task was not launched by a marinbuild driver) is dropped:
progress is a convenience, never a reason for a step to fail.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from marinbuild.run import events as ev

logger = logging.getLogger("marinbuild")

POLL = 1.0
"""Seconds the driver's ``take`` waits for a report before asking again (and seeing whether it should stop)."""


def relay_name(holder: str) -> str:
    return f"marinbuild-progress-{holder}"


class _RelayActor:
    """A Ray actor: reports in, batches of them out."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str, str, dict[str, Any]]] = []
        self._arrived: Any = None

    def _event(self) -> Any:
        import asyncio

        if self._arrived is None:  # made in the actor's event loop
            self._arrived = asyncio.Event()
        return self._arrived

    async def report(self, item: tuple[str, str, str, dict[str, Any]]) -> None:
        self._items.append(item)
        self._event().set()

    async def wake(self) -> None:
        self._event().set()

    async def take(self, timeout: float) -> list[tuple[str, str, str, dict[str, Any]]]:
        import asyncio

        arrived = self._event()
        if not self._items:
            try:
                await asyncio.wait_for(arrived.wait(), timeout)
            except TimeoutError:
                pass
        items, self._items = self._items, []
        arrived.clear()
        return items


class ProgressRelay:
    """The driver's end: the relay actor, and a thread emitting its reports while launched steps run.

    The thread runs only while some watched step runs (``watch`` at its launch, ``unwatch`` when it
    ends): when the last one ends the thread's pending ``take`` is woken and the thread ends; ``stop``
    (the backend's shutdown) also waits for it, so no thread of ours is inside a Ray call when the
    build, and perhaps the process and Ray, end.
    """

    def __init__(self, holder: str):
        import ray

        self._ray = ray
        self._lock = threading.Lock()
        self._buses: dict[str, ev.EventBus] = {}
        self._thread: threading.Thread | None = None
        self._actor = (
            ray.remote(_RelayActor)
            .options(name=relay_name(holder), num_cpus=0, max_restarts=0, get_if_exists=True)
            .remote()
        )

    def watch(self, output_path: str, bus: ev.EventBus) -> None:
        """Reports of the step at ``output_path`` go to ``bus`` until ``unwatch``."""
        with self._lock:
            self._buses[output_path] = bus
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="marinbuild-ray-progress", daemon=True)
                self._thread.start()

    def unwatch(self, output_path: str) -> None:
        """The step ended; after the last one the thread is woken and ends (``stop`` also waits for it)."""
        with self._lock:
            self._buses.pop(output_path, None)
            wake = self._thread is not None and not self._buses
        if wake:
            self._wake()

    def _wake(self) -> None:
        try:
            self._actor.wake.remote()  # type: ignore[attr-defined]  # ray types .remote only on @ray.method methods
        except Exception:
            logger.debug("could not wake the progress relay", exc_info=True)

    def stop(self) -> None:
        with self._lock:
            self._buses.clear()
            thread = self._thread
        if thread is not None:
            self._wake_and_join(thread)

    def _wake_and_join(self, thread: threading.Thread) -> None:
        self._wake()
        if thread is not threading.current_thread():
            thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            with self._lock:
                if not self._buses:
                    self._thread = None
                    return
            try:
                items = self._ray.get(self._actor.take.remote(POLL))  # type: ignore[attr-defined]  # as in _wake
            except BaseException:  # Ray is gone or the actor died (Ray raises SystemExit after its shutdown)
                logger.debug("the progress relay stopped", exc_info=True)
                with self._lock:
                    self._thread = None
                return
            for step, output_path, detail, data in items:
                bus = self._buses.get(output_path)
                if bus is not None:
                    bus.emit(ev.PROGRESS, step=step, output_path=output_path, detail=detail, data=data)


def task_reporter(holder: str, step: str, output_path: str) -> Callable[[str, dict[str, Any]], None]:
    """In a step's task: a reporter sending to the relay of the driver ``holder`` (found on first use)."""
    actor: list[Any] = []

    def report(detail: str, data: dict[str, Any]) -> None:
        try:
            if not actor:
                import ray

                actor.append(ray.get_actor(relay_name(holder)))
            actor[0].report.remote((step, output_path, detail, data))
        except Exception:
            logger.debug("could not send a progress report of %s", step, exc_info=True)

    return report
