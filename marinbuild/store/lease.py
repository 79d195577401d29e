"""Leases: who may run a step right now.

A lease is the ``.executor_status.lock`` file beside a step's outputs, Marin's JSON ``{"worker_id", "timestamp"}``. Its
holder refreshes the timestamp; a lease not refreshed for ``stale_after`` seconds, or whose holder is provably gone
(``holders``), may be taken over. ``Lease`` is the interface; ``lease_factory.lease_for`` picks ``lease_local`` or
``lease_gcs`` for a path."""

from __future__ import annotations

import abc
import json
import time
from dataclasses import dataclass

from marinbuild.store.holders import provably_gone
from marinbuild.store.status import DamagedFileError, status_path

HEARTBEAT_INTERVAL = 30.0
STALE_AFTER = 90.0


class LeaseLostError(Exception):
    """Another runner holds (or removed) the lease this runner thought it held."""


@dataclass(frozen=True)
class LeaseRecord:
    worker_id: str
    timestamp: float

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.timestamp

    def is_stale(self, stale_after: float, now: float | None = None) -> bool:
        return self.age(now) > stale_after

    def is_over(self, stale_after: float) -> bool:
        """Nobody holds this lease any more: it is stale, or its holder is provably gone (``holders``)."""
        return self.is_stale(stale_after) or provably_gone(self.worker_id)


def lease_path(output_path: str) -> str:
    return status_path(output_path) + ".lock"


def parse_lease(path: str, data: bytes) -> LeaseRecord | None:
    """The record in a lease file; None for an empty file (a writer died before writing). Trailing whitespace
    (the padding of a local lease rewritten with a shorter record) is JSON whitespace: Marin reads it too."""
    if not data.strip():
        return None
    try:
        obj = json.loads(data)
        return LeaseRecord(worker_id=str(obj["worker_id"]), timestamp=float(obj["timestamp"]))
    except (ValueError, KeyError, TypeError):
        raise DamagedFileError(path, "lease file is not JSON with worker_id and timestamp") from None


def encode_lease(record: LeaseRecord) -> bytes:
    return json.dumps({"worker_id": record.worker_id, "timestamp": record.timestamp}).encode()


class Lease(abc.ABC):
    """One runner's handle on one step's lease."""

    makes_output_folder = False  # taking the lease leaves the step's output folder in place (a local lease)
    round_trips = False  # each operation is a remote request: a caller with many leases uses threads

    def __init__(self, output_path: str, worker_id: str, stale_after: float = STALE_AFTER):
        self.output_path = output_path
        self.path = lease_path(output_path)
        self.worker_id = worker_id
        self.stale_after = stale_after

    @abc.abstractmethod
    def try_acquire(self) -> bool:
        """Take the lease if it is free or stale; False if another runner holds a live one."""

    @abc.abstractmethod
    def refresh(self) -> None:
        """Renew our lease; raises ``LeaseLostError`` if it is no longer ours."""

    def confirm(self) -> None:
        """Right before committing: raise ``LeaseLostError`` unless the lease is still ours (renewing it does)."""
        self.refresh()

    def check(self) -> None:
        """Read-only: raise ``LeaseLostError`` unless the lease file names ``worker_id``. For a process committing
        for the holder (a Ray task for its driver): the lease's renewals (on GCS, generations) are the holder's."""
        self._ensure_ours(self.holder())

    def _ensure_ours(self, record: LeaseRecord | None) -> None:
        """Raise ``LeaseLostError`` unless ``record`` names ``worker_id``."""
        if record is None or record.worker_id != self.worker_id:
            holder = record.worker_id if record is not None else "nobody (it was released or taken over and finished)"
            raise LeaseLostError(f"lease {self.path} is held by {holder}, not {self.worker_id}")

    @abc.abstractmethod
    def release(self) -> None:
        """Delete the lease if it is ours; leaves another runner's lease alone."""

    @abc.abstractmethod
    def holder(self) -> LeaseRecord | None:
        """The current lease record, if any."""

    def held_by_other_live(self) -> LeaseRecord | None:
        """The record of a live lease held by someone else, else None."""
        record = self.holder()
        if record is None or record.worker_id == self.worker_id or record.is_over(self.stale_after):
            return None
        return record
