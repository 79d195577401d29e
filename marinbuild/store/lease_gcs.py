"""Leases on GCS by object generation: the same protocol as the local lease, without flock.

The lease is ``<output>/.executor_status.lock`` holding Marin's JSON ``{"worker_id", "timestamp"}``; every change is a
compare-and-swap on its generation. Acquire creates it with ``ifGenerationMatch=0``, or overwrites a stale, empty,
unparsable-and-old or provably abandoned one at the generation read (exactly one racer wins); heartbeat overwrites and
release deletes at our last write's generation, so a heartbeat is one request that fails once anyone else wrote. Unlike
Marin's ``GcsLease``, the heartbeat needs no read, release is conditional, and a retried write whose first attempt
landed is recognised, not reported as a lost race."""

from __future__ import annotations

import contextlib
import threading
import time

from marinbuild.store import gcs
from marinbuild.store.lease import Lease, LeaseLostError, LeaseRecord, encode_lease, parse_lease
from marinbuild.store.status import DamagedFileError


class GCSLease(Lease):
    round_trips = True

    def __init__(self, output_path: str, worker_id: str, stale_after: float):
        super().__init__(output_path, worker_id, stale_after)
        self._generation: int | None = None  # of our last write of the lease, while we hold it
        self._lock = threading.Lock()  # the lease keeper and the committing thread may refresh at once

    def _read(self) -> tuple[LeaseRecord | None, int]:
        got = gcs.read_with_generation(self.path)
        if got is None:
            return None, 0
        data, generation = got
        return parse_lease(self.path, data), generation

    def _write(self, if_generation: int) -> int:
        return gcs.write_if_generation(self.path, encode_lease(LeaseRecord(self.worker_id, time.time())), if_generation)

    def try_acquire(self) -> bool:
        for _ in range(8):
            with contextlib.suppress(gcs.PreconditionFailed):
                self._generation = self._write(0)
                return True
            got = gcs.read_with_generation(self.path)
            if got is None:
                continue  # released between our create and our read: try creating again
            data, generation = got
            try:
                current = parse_lease(self.path, data)
            except DamagedFileError:
                if not self._unchanged_for_stale_time(generation):
                    return False  # unparsable and recent: wait, it may still be replaced by its writer
                current = None
            if current is not None and current.worker_id != self.worker_id and not current.is_over(self.stale_after):
                return False
            try:
                self._generation = self._write(generation)
                return True
            except gcs.PreconditionFailed:
                return False  # another runner took the free or stale lease first
        return False

    def _unchanged_for_stale_time(self, generation: int) -> bool:
        """The object is still at ``generation`` and was last written more than the stale time ago."""
        updated = gcs.last_written(self.path, generation)
        return updated is not None and time.time() - updated > self.stale_after

    def refresh(self) -> None:
        with self._lock:
            if self._generation is None:
                current, generation = self._read()
                self._ensure_ours(current)
                self._generation = generation
            try:
                self._generation = self._write(self._generation)
            except gcs.PreconditionFailed:
                self._generation = None
                raise LeaseLostError(f"lease {self.path} changed under {self.worker_id}: {self._describe()}") from None

    def _describe(self) -> str:
        try:
            current, _ = self._read()
        except DamagedFileError as exc:
            return f"overwritten with unreadable content ({exc})"
        if current is None:
            return "it was deleted (another runner took it over and finished)"
        return f"now held by {current.worker_id}"

    def release(self) -> None:
        with self._lock, contextlib.suppress(DamagedFileError):  # unreadable: not ours to delete
            generation, self._generation = self._generation, None
            if generation is None or gcs.endpoint() is not None:
                # Without our generation, or on an emulator that ignores delete preconditions: check first.
                current, now = self._read()
                if current is None or current.worker_id != self.worker_id or (generation and now != generation):
                    return
                generation = now
            gcs.delete_if_generation(self.path, generation)

    def holder(self) -> LeaseRecord | None:
        return self._read()[0]
