"""Keeping leases alive and letting runners in one process wait for each other.

``LeaseKeeper`` is one thread per process that refreshes every held lease on a timer and
reports a lost lease to its step. ``LocalRunners`` lets a runner that finds a lease held
by another runner *in this process* wait on an event instead of polling the store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from marinbuild.store.lease import Lease, LeaseLostError


class LeaseKeeper:
    """Refreshes held leases every ``interval`` seconds; calls ``on_lost`` when one is lost."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._leases: dict[int, tuple[Lease, float, float, Callable[[BaseException], None]]] = {}
        self._thread: threading.Thread | None = None

    def add(self, lease: Lease, interval: float, on_lost: Callable[[BaseException], None]) -> None:
        with self._cond:
            self._leases[id(lease)] = (lease, interval, time.monotonic() + interval, on_lost)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="marinbuild-lease-keeper", daemon=True)
                self._thread.start()
            self._cond.notify()

    def remove(self, lease: Lease) -> None:
        with self._cond:
            self._leases.pop(id(lease), None)

    def _loop(self) -> None:
        while True:
            with self._cond:
                now = time.monotonic()
                due = [(k, v) for k, v in self._leases.items() if v[2] <= now]
                if not due:
                    next_due = min((v[2] for v in self._leases.values()), default=None)
                    self._cond.wait(None if next_due is None else next_due - now)
                    continue
                for key, (lease, interval, _, on_lost) in due:
                    self._leases[key] = (lease, interval, now + interval, on_lost)
            for _key, (lease, _, _, on_lost) in due:
                try:
                    lease.refresh()
                except LeaseLostError as exc:
                    self.remove(lease)
                    on_lost(exc)
                except Exception:  # a transient store error: try again at the next beat
                    continue


LEASE_KEEPER = LeaseKeeper()


class LocalRunners:
    """Lease paths held by runners of this process, each with an event set when that runner finishes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}

    def started(self, lease_path: str) -> threading.Event:
        """Register this runner as the holder; returns its token for ``finished``."""
        event = threading.Event()
        with self._lock:
            self._events[lease_path] = event
        return event

    def finished(self, lease_path: str, event: threading.Event) -> None:
        """Wake whoever waits on this runner; the next holder may already have registered its own event."""
        with self._lock:
            if self._events.get(lease_path) is event:
                del self._events[lease_path]
        event.set()

    def event_for(self, lease_path: str) -> threading.Event | None:
        with self._lock:
            return self._events.get(lease_path)


LOCAL_RUNNERS = LocalRunners()
