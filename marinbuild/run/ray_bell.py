"""The Ray backend's bell: how another thread wakes the driver loop out of ``ray.wait`` at once.

A step submitted from another thread (the first ones, or one a lease thread prepared) while the
loop waits rings the loop's bell: the loop's ``ray.wait`` includes a pending call to a small
actor (``_BellActor``, one per driver process and Ray session, no CPUs, beside the driver if it can
be) that returns when rung. A cheaper bell, cancelling a task that waits on a never-ready argument,
trips a Ray reference-counting check when that argument's actor exits.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("marinbuild")


class _BellActor:
    """A Ray actor: ``wait(key, seen)`` returns once ``ring(key)`` was called more than ``seen`` times."""

    def __init__(self) -> None:
        self._rings: dict[str, int] = {}
        self._changed: Any = None

    def _condition(self) -> Any:
        import asyncio

        if self._changed is None:  # made in the actor's event loop
            self._changed = asyncio.Condition()
        return self._changed

    async def wait(self, key: str, seen: int) -> int:
        changed = self._condition()
        async with changed:
            await changed.wait_for(lambda: self._rings.get(key, 0) > seen)
            return self._rings[key]

    async def ring(self, key: str) -> None:
        changed = self._condition()
        async with changed:
            self._rings[key] = self._rings.get(key, 0) + 1
            changed.notify_all()


@dataclass(frozen=True)
class Bell:
    """A driver loop's pending ``wait`` on the bell actor: ringing it wakes the loop out of ``ray.wait``."""

    actor: Any
    key: str
    ref: Any

    def ring(self) -> None:
        try:
            self.actor.ring.remote(self.key)
        except Exception:  # Ray is gone: so is the loop's wait
            logger.debug("could not ring the driver loop's bell", exc_info=True)


class Bells:
    """The bell actor of this driver process (one per Ray session; no CPUs, beside the driver if it can be)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: Any = None
        self._actor: Any = None

    def new(self, key: str, seen: int, previous: Any = None) -> tuple[Bell, int]:
        """A bell for ``key`` after ``seen`` rings of the ``previous`` bell's actor.

        Returns the bell and its ``seen``: 0 if its actor is not the previous one (a new actor counts from 0).
        """
        import ray

        with self._lock:
            session = ray.get_runtime_context().get_job_id()
            if self._actor is None or self._session != session:
                options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0}
                try:
                    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                    node = ray.get_runtime_context().get_node_id()
                    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
                except Exception:
                    logger.debug("no node affinity for the bell actor", exc_info=True)
                self._actor = ray.remote(_BellActor).options(**options).remote()
                self._session = session
            actor = self._actor
        if actor is not previous:
            seen = 0
        return Bell(actor, key, actor.wait.remote(key, seen)), seen

    def lose(self, actor: Any) -> None:
        """``actor`` died: the next bell gets a new one."""
        with self._lock:
            if self._actor is actor:
                self._actor = None


BELLS = Bells()
