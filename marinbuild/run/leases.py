"""Keeping leases alive: a build owns one ``LeaseKeeper`` (in its ``BuildContext``), not a process-wide one.
Leases on a remote store (``Lease.round_trips``) are renewed on a small thread pool, one renewal per lease at a
time, so a store that stops answering holds up no other lease (each request is bounded: ``store.gcs``)."""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from marinbuild.store.lease import Lease, LeaseLostError

RENEWERS = 16  # threads renewing remote leases at once (a renewal is one small request)


def _forget(exc: BaseException) -> None:
    """``on_lost`` of a lease no longer held: its step is done, nothing to tell."""


class _Held:
    """One held lease in the keeper's heap; ``dropped`` once removed (the heap forgets it lazily)."""

    __slots__ = ("lease", "interval", "on_lost", "dropped", "busy")

    def __init__(self, lease: Lease, interval: float, on_lost: Callable[[BaseException], None]) -> None:
        self.lease = lease
        self.interval = interval
        self.on_lost = on_lost
        self.dropped = False
        self.busy = False  # a renewal of it is in flight on the pool


class LeaseKeeper:
    """One thread renewing held leases every ``interval`` seconds, calling ``on_lost`` for a lost one; a heap on the
    next renewal (``add``/``remove``: O(log n), removals marked) and no polling."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Held]] = []
        self._held: dict[int, _Held] = {}
        self._dropped = 0  # entries of the heap marked dropped
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._held)

    def add(self, lease: Lease, interval: float, on_lost: Callable[[BaseException], None]) -> None:
        held = _Held(lease, interval, on_lost)
        due = time.monotonic() + interval
        with self._cond:
            self._drop(self._held.get(id(lease)))
            self._held[id(lease)] = held
            heapq.heappush(self._heap, (due, next(self._seq), held))
            if self._closed:
                raise RuntimeError("the lease keeper is closed: its build has ended")
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="marinbuild-lease-keeper", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is held:  # due before everything else: the thread must wake earlier
                self._cond.notify()

    def remove(self, lease: Lease) -> None:
        with self._cond:
            self._drop(self._held.get(id(lease)))

    def close(self) -> None:
        """Forget every held lease and end the thread (and the pool) once idle: the owning build's end."""
        with self._cond:
            self._closed = True
            for held in list(self._held.values()):
                self._drop(held)
            self._heap.clear()
            self._dropped = 0
            self._cond.notify()
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)

    def _drop(self, held: _Held | None) -> None:
        """Forget ``held`` (with the condition held)."""
        if held is None or held.dropped:
            return
        held.dropped = True
        held.on_lost = _forget  # a dropped entry may wait in the heap: it must not keep its step's job alive
        del self._held[id(held.lease)]
        self._dropped += 1
        if self._dropped > 64 and self._dropped > len(self._held):  # amortized O(1) per removal
            self._heap = [entry for entry in self._heap if not entry[2].dropped]
            heapq.heapify(self._heap)
            self._dropped = 0

    def _due(self) -> list[_Held] | None:
        """Wait until a renewal is due; the leases due now, each rescheduled one interval on (None once closed)."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                while self._heap and self._heap[0][2].dropped:
                    heapq.heappop(self._heap)
                    self._dropped -= 1
                if not self._heap:
                    self._cond.wait()
                    continue
                now = time.monotonic()
                if self._heap[0][0] > now:
                    self._cond.wait(self._heap[0][0] - now)
                    continue
                due = []
                while self._heap and self._heap[0][0] <= now:
                    _, _, held = heapq.heappop(self._heap)
                    if held.dropped:
                        self._dropped -= 1
                        continue
                    due.append(held)
                    heapq.heappush(self._heap, (now + held.interval, next(self._seq), held))
                return due

    def _loop(self) -> None:
        while (due := self._due()) is not None:
            for held in due:
                if held.dropped or held.busy:  # removed since (its step is committing or done), or still renewing
                    continue
                if getattr(held.lease, "round_trips", False):
                    held.busy = True
                    try:
                        self._renewers().submit(self._renew, held)
                    except RuntimeError:  # closed meanwhile: nothing is held any more
                        return
                else:
                    self._renew(held)

    def _renewers(self) -> ThreadPoolExecutor:
        with self._cond:
            if self._closed:
                raise RuntimeError("the lease keeper is closed")
            if self._pool is None:
                self._pool = ThreadPoolExecutor(RENEWERS, thread_name_prefix="marinbuild-lease-renew")
            return self._pool

    def _renew(self, held: _Held) -> None:
        on_lost = held.on_lost
        try:
            held.lease.refresh()
        except LeaseLostError as exc:
            with self._cond:
                self._drop(held)
            on_lost(exc)
        except Exception:  # a store error (each request is bounded): try again at the next beat
            pass
        finally:
            held.busy = False


class BuildContext:
    """The state one build owns, handed down to what needs it instead of kept in module globals (as ninja's
    ``State``): ``Engine.run`` makes one per build and closes it at the end, so a process that runs many builds
    keeps no idle lease keeper thread. Process-wide on purpose: the GCS client, imported rules modules and shipped
    code (Python's module table is per process), and Marin's mirror budget (``$MARIN_MIRROR_BUDGET_GB``)."""

    def __init__(self) -> None:
        self.lease_keeper = LeaseKeeper()

    def __enter__(self) -> BuildContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.lease_keeper.close()
