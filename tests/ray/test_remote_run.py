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


def test_a_config_class_of_the_drivers_main_is_pickled_once_and_rebuilt_in_another_process(tmp_path):
    """Config dataclasses defined in the build's script (``__main__``) go by value: once, not per task."""
    import dataclasses
    import subprocess
    import sys

    from marinbuild.run.ray_task import pickle_payload

    config_class = dataclasses.make_dataclass("ScriptConfig", [("output_path", str), ("n", int)], frozen=True)
    config_class.__module__ = "__main__"  # as if defined in the driver's script (not importable elsewhere)
    shipped: dict[type, tuple[str, bytes]] = {}
    payloads = [pickle_payload((config_class(f"/out/s{i}", i), None), shipped) for i in range(3)]
    assert list(shipped) == [config_class]  # pickled by value once, then referred to
    for i, payload in enumerate(payloads):
        (tmp_path / f"p{i}").write_bytes(payload)
    code = (
        "import sys; from pathlib import Path; from marinbuild.run.ray_task import unpickle_payload as u; "
        "got = [u(Path(sys.argv[1], f'p{i}').read_bytes())[0] for i in range(3)]; "
        "assert len({type(c) for c in got}) == 1; print([(type(c).__name__, c.output_path, c.n) for c in got])"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str([("ScriptConfig", f"/out/s{i}", i) for i in range(3)])
