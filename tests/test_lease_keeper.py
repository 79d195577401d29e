"""The lease keeper: renews each held lease when due, forgets removed ones, reports lost ones."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from marinbuild.run.leases import LeaseKeeper
from marinbuild.store.lease import LeaseLostError


class FakeLease:
    """Counts renewals; sets ``renewed`` after ``want`` of them; raises once ``lost`` is set."""

    def __init__(self, want: int = 1) -> None:
        self.calls = 0
        self.want = want
        self.renewed = threading.Event()
        self.lost = False

    def refresh(self) -> None:
        self.calls += 1
        if self.lost:
            raise LeaseLostError("taken over")
        if self.calls >= self.want:
            self.renewed.set()


def test_renews_every_interval_until_removed() -> None:
    keeper = LeaseKeeper()
    lease = FakeLease(want=3)
    keeper.add(lease, 0.02, lambda exc: None)  # type: ignore[arg-type]
    assert lease.renewed.wait(5)
    keeper.remove(lease)  # type: ignore[arg-type]
    calls = lease.calls
    time.sleep(0.1)
    assert lease.calls <= calls + 1  # at most one renewal already under way
    assert len(keeper) == 0


def test_a_lease_due_first_wakes_the_keeper() -> None:
    keeper = LeaseKeeper()
    slow = FakeLease()
    keeper.add(slow, 3600, lambda exc: None)  # type: ignore[arg-type]
    fast = FakeLease()
    keeper.add(fast, 0.01, lambda exc: None)  # type: ignore[arg-type]
    assert fast.renewed.wait(5)
    assert slow.calls == 0


def test_a_lost_lease_is_reported_once_and_dropped() -> None:
    keeper = LeaseKeeper()
    lease = FakeLease()
    lease.lost = True
    reports: list[BaseException] = []
    reported = threading.Event()
    keeper.add(lease, 0.01, lambda exc: (reports.append(exc), reported.set()))  # type: ignore[arg-type]
    assert reported.wait(5)
    time.sleep(0.05)
    assert len(reports) == 1 and isinstance(reports[0], LeaseLostError)
    assert len(keeper) == 0


def test_many_adds_and_removes_leave_no_garbage() -> None:
    """Removed leases are let go (not kept until their renewal would have come up, an hour later)."""
    keeper = LeaseKeeper()
    leases = [FakeLease() for _ in range(2000)]
    for lease in leases:
        keeper.add(lease, 3600, lambda exc: None)  # type: ignore[arg-type]
    for lease in leases:
        keeper.remove(lease)  # type: ignore[arg-type]
    assert len(keeper) == 0
    assert all(lease.calls == 0 for lease in leases)
    refs = [weakref.ref(lease) for lease in leases]
    del leases, lease
    gc.collect()
    assert sum(ref() is not None for ref in refs) <= 65  # dropped entries are purged once they outnumber held ones


def test_closing_ends_the_keeper() -> None:
    """A build closes its keeper at its end: it forgets its leases, its thread ends, no lease can be added."""
    before = set(threading.enumerate())
    keeper = LeaseKeeper()
    lease = FakeLease(want=2)
    keeper.add(lease, 0.01, lambda exc: None)  # type: ignore[arg-type]
    assert lease.renewed.wait(5)
    started = [t for t in set(threading.enumerate()) - before if t.name == "marinbuild-lease-keeper"]
    assert len(started) == 1
    keeper.close()
    started[0].join(30)
    assert not started[0].is_alive()
    assert len(keeper) == 0
    with pytest.raises(RuntimeError, match="closed"):
        keeper.add(FakeLease(), 0.01, lambda exc: None)  # type: ignore[arg-type]


class StuckRemoteLease(FakeLease):
    """A lease on a store that stopped answering: its renewal blocks until ``answer`` is set."""

    round_trips = True

    def __init__(self) -> None:
        super().__init__()
        self.answer = threading.Event()

    def refresh(self) -> None:
        self.calls += 1
        self.answer.wait()


def test_a_stuck_remote_renewal_holds_up_no_other_lease() -> None:
    keeper = LeaseKeeper()
    stuck, other = StuckRemoteLease(), FakeLease(want=3)
    keeper.add(stuck, 0.01, lambda exc: None)  # type: ignore[arg-type]
    keeper.add(other, 0.02, lambda exc: None)  # type: ignore[arg-type]
    try:
        assert other.renewed.wait(5)
        assert stuck.calls == 1  # one renewal of a lease at a time: the stuck one is not piled up
    finally:
        stuck.answer.set()
        keeper.remove(stuck)  # type: ignore[arg-type]
        keeper.remove(other)  # type: ignore[arg-type]
