"""Each defect the kill soak found, reproduced by killing (or pausing) a small build at one metadata write."""

from __future__ import annotations

import json
import os
import signal
import time

import harness as h
import marin_lease

from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path
from marinbuild.store.lease_factory import lease_for


def _last(points: list[str], *words: str) -> int:
    """The 1-based number of the last fault point whose name has all ``words``."""
    return max(i for i, name in enumerate(points, 1) if all(w in name for w in words))


def _first(points: list[str], *words: str) -> int:
    return min(i for i, name in enumerate(points, 1) if all(w in name for w in words))


def test_a_kill_while_writing_failed_leaves_a_status_every_run_reads(tmp_path):
    """Torn status: FAILED written over RUNNING, killed in the middle. Every later run, --dry_run too, must read it."""
    points = h.fault_points(str(tmp_path / "list"), "--fail")
    prefix = str(tmp_path / "p")
    h.kill_at(prefix, points, _last(points, "f-", ".executor_status"), "--fail")
    folder = h.step_folder(prefix, "f")
    assert st.read_status(folder) in (st.STATUS_RUNNING, st.STATUS_FAILED)
    dry = h.run(prefix, "--fail", "--dry_run")
    assert dry.code == 0, dry
    again = h.run(prefix, "--fail")
    assert again.code == 1 and again.result["error"].startswith("StepFailedError"), again
    assert st.read_status(folder) == st.STATUS_FAILED


def _stale_lease_of_a_long_named_runner(prefix: str) -> str:
    """Step a left RUNNING under a stale lease whose holder's id is longer than any runner's of this host."""
    points_prefix = prefix + "-list"
    h.fault_points(points_prefix)
    folder = os.path.join(prefix, os.path.basename(h.step_folder(points_prefix, "a")))
    os.makedirs(folder)
    st.write_status(folder, st.STATUS_RUNNING)
    with open(lease_path(folder), "wb") as f:
        long_id = "a-runner-on-another-machine-with-a-long-name-" + "x" * 40
        f.write(encode_lease(LeaseRecord(long_id, time.time() - 900)))
    return folder


def test_a_kill_while_taking_over_a_stale_lease_leaves_a_lease_that_parses(tmp_path):
    """Torn lease: the takeover rewrites a longer record with a shorter one; a kill there must not leave a mix."""
    _stale_lease_of_a_long_named_runner(str(tmp_path / "list"))
    points = h.fault_points(str(tmp_path / "list"))  # the same build, listing its writes
    prefix = str(tmp_path / "p")
    folder = _stale_lease_of_a_long_named_runner(prefix)
    h.kill_at(prefix, points, _first(points, "lease-rewrite"))
    record = lease_for(folder, "reader").holder()  # parses: the old record or the new one, never a mix
    assert record is not None
    again = h.run(prefix)
    assert again.code == 0 and again.result["waits"] == [], again
    assert lease_for(folder, "reader").holder() is None


def test_an_unparsable_lease_older_than_the_stale_time_is_stale_not_fatal(tmp_path):
    prefix = str(tmp_path / "p")
    folder = _stale_lease_of_a_long_named_runner(prefix)
    with open(lease_path(folder), "wb") as f:
        f.write(b'{"worker_id": "w", "timestamp": 1}}')  # what a torn rewrite used to leave
    old = time.time() - 900
    os.utime(lease_path(folder), (old, old))
    again = h.run(prefix)
    assert again.code == 0, again
    assert sorted(again.result["ran"]) == ["a", "b", "c", "d"]


def test_marin_never_takes_a_lease_marinbuild_is_creating(tmp_path):
    """Interop window: marinbuild paused right after creating step a's lease file; Marin's lease code looks in."""
    points = h.fault_points(str(tmp_path / "list"))
    prefix = str(tmp_path / "p")
    proc = h.stop_at(prefix, points, _first(points, "lease-created a-"))
    try:
        folder = h.step_folder(prefix, "a")
        took = marin_lease.try_acquire(lease_path(folder), "marin-host-1234")
        assert not took, "Marin took a lease marinbuild holds: both would run the step"
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        try:
            out, err = proc.communicate(timeout=h.RUN_TIMEOUT)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["ok"]


def test_marin_holding_a_lease_keeps_marinbuild_out(tmp_path):
    """The other way round: a fresh lease Marin wrote (Marin's id, no pid to check) is waited for, not taken."""
    folder = str(tmp_path / "s-1")
    assert marin_lease.try_acquire(lease_path(folder), "marin-host-1234")
    assert not lease_for(folder, "marinbuild-x").try_acquire()


def test_a_rerun_after_a_kill_takes_the_dead_runners_leases_at_once(tmp_path):
    """Needless waits: the killed runner's leases (this host, process gone) are taken over without waiting."""
    points = h.fault_points(str(tmp_path / "list"))
    prefix = str(tmp_path / "p")
    h.kill_at(prefix, points, _first(points, "a-", ".executor_info"))
    assert lease_for(h.step_folder(prefix, "a"), "reader").holder() is not None  # left by the dead runner
    again = h.run(prefix)
    assert again.code == 0 and again.result["waits"] == [] and "a" in again.result["ran"], again


def test_an_empty_lease_file_does_not_make_a_runner_wait(tmp_path):
    """An empty lease file (a Marin writer killed between its truncate and its write) is free under the flock."""
    prefix = str(tmp_path / "p")
    folder = _stale_lease_of_a_long_named_runner(prefix)
    open(lease_path(folder), "wb").close()
    again = h.run(prefix)
    assert again.code == 0 and again.result["waits"] == [], again
