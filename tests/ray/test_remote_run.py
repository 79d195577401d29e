"""``RemoteRun``: what a Ray task writes under its driver's lease (no cluster needed), on a local and a gs:// prefix."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from marinbuild.run.step_job import OutputFolderMissingError, RemoteRun
from marinbuild.store import action_cache, fs, records
from marinbuild.store import status as st
from marinbuild.store.action_cache import ActionKey
from marinbuild.store.lease import LeaseLostError
from marinbuild.store.lease_factory import lease_for

INFO = json.dumps({"name": "demo/s", "output_path": "x"}, indent=2)


def _run(out: str, holder: str = "driver") -> RemoteRun:
    return pickle.loads(pickle.dumps(RemoteRun(out, ActionKey.of("version of s", "demo/s"), INFO, holder, 90.0)))


@pytest.fixture(params=["local", "gs"])
def out(request, prefix):
    if request.param == "local":
        return os.path.join(prefix, "demo", "s-abc123")
    gs_prefix = request.getfixturevalue("gs_prefix")
    return f"{gs_prefix}/demo/s-abc123"


def test_it_writes_running_and_info_then_commits_and_never_touches_the_lease(out):
    lease = lease_for(out, "driver")
    assert lease.try_acquire()  # the driver's (it makes the folder)
    run = _run(out)
    assert run.start()
    assert st.read_status(out) == st.STATUS_RUNNING and records.read_info(out)["name"] == "demo/s"
    fs.write_atomic(fs.join(out, "out.txt"), b"output")
    run.commit({"answer": 42})
    assert st.read_status(out) == st.STATUS_SUCCESS and records.read_artifact(out) == {"answer": 42}
    record = action_cache.read_record(out, action_cache.version_digest("version of s"))
    assert record is not None and record.worker_id == "driver" and record.files == 1
    lease.refresh()  # still the driver's, at the generation the driver last wrote (on GCS)
    assert lease.holder().worker_id == "driver"
    lease.release()


def test_a_retry_after_the_commit_writes_nothing(out):
    """A task whose worker died between SUCCESS and its reply is run again: it must not write RUNNING over SUCCESS."""
    lease = lease_for(out, "driver")
    assert lease.try_acquire()
    run = _run(out)
    assert run.start()
    run.commit("v")
    assert run.start() is False
    assert st.read_status(out) == st.STATUS_SUCCESS
    lease.release()


def test_no_success_once_another_runner_took_the_lease_over(out):
    assert lease_for(out, "driver").try_acquire()
    run = _run(out)
    assert run.start()
    assert lease_for(out, "other", stale_after=-1).try_acquire()  # the driver's lease went stale: taken over
    with pytest.raises(LeaseLostError, match="other"):
        run.commit("v")
    assert st.read_status(out) == st.STATUS_RUNNING
    assert records.read_artifact(out) is None and not action_cache.digests_at(out)
    assert lease_for(out, "x").holder().worker_id == "other"


def test_no_success_once_the_lease_is_gone(out):
    lease = lease_for(out, "driver")
    assert lease.try_acquire()
    run = _run(out)
    assert run.start()
    lease.release()
    with pytest.raises(LeaseLostError, match="nobody"):
        run.commit("v")
    assert st.read_status(out) == st.STATUS_RUNNING


def test_a_worker_that_cannot_see_a_local_output_folder_says_so(tmp_path):
    run = _run(str(tmp_path / "not-shared" / "s-abc123"))
    with pytest.raises(OutputFolderMissingError, match="shares"):
        run.start()
    assert not (tmp_path / "not-shared").exists()
