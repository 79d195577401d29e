"""Leases on a local folder: Marin's lease file under flock."""

from __future__ import annotations

import os
import time

import pipelines as pl
import pytest

from marinbuild.store.lease import LeaseLostError, LeaseRecord, encode_lease, lease_path
from marinbuild.store.lease_factory import lease_for


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_local_lease_protocol(tmp_path):
    out = str(tmp_path / "step-abc123")
    pl.check_lease_protocol(out, "LocalFileLease", stale_after=0.2)
    assert os.path.isdir(out)  # taking the lease made the step's folder


def test_a_released_lease_leaves_no_file_and_no_descriptor(tmp_path):
    before = _open_fds()
    lease = lease_for(str(tmp_path / "s-1"), "runner-a")
    assert lease.try_acquire()
    lease.check()
    assert lease.holder().worker_id == "runner-a"
    lease.release()
    assert _open_fds() == before
    assert not os.path.exists(lease_path(str(tmp_path / "s-1")))
    lease.release()  # twice: nothing left to do


def test_a_replaced_lease_file_is_read_by_path_and_left_alone(tmp_path):
    """Another runner deleted the lease file and made its own: the runner that created the first sees it lost."""
    out = str(tmp_path / "s-2")
    a = lease_for(out, "runner-a")
    assert a.try_acquire()
    path = lease_path(out)
    os.unlink(path)
    with open(path, "wb") as f:
        f.write(encode_lease(LeaseRecord("runner-c", time.time())))
    assert a.holder().worker_id == "runner-c"
    with pytest.raises(LeaseLostError, match="runner-c"):
        a.check()
    a.release()
    assert lease_for(out, "x").holder().worker_id == "runner-c"


def test_lease_race_between_threads_has_one_winner(tmp_path):
    out = str(tmp_path / "raced")
    winners, leases = pl.race_for_lease(out)
    assert len(winners) == 1
    for lease in leases:
        lease.release()
    assert not os.path.exists(lease_path(out))
