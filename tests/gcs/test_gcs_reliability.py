"""Six runners racing on one gs:// prefix, and a bucket that stops answering (a proxy that never replies)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from marinbuild.store import status as st

HERE = Path(__file__).parent
REPO = HERE.parent.parent
WIDE = 16
"""Steps in the racers' graph: a root, 14 steps on it, a sink on those."""


def _env(log: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), str(REPO), env.get("PYTHONPATH", "")])
    env["MARINBUILD_TEST_CALL_LOG"] = str(log)
    return {**env, **extra}


def test_six_runners_racing_on_one_prefix_run_each_step_once(gs_prefix, tmp_path):
    log = tmp_path / "calls.log"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "gcs_pipelines.py"), gs_prefix, "wide", str(WIDE)],
            env=_env(log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    calls = log.read_text().split()
    assert len(calls) == WIDE and len(set(calls)) == WIDE, calls
    assert all(st.read_status(c) == st.STATUS_SUCCESS for c in calls)


KILL_BUILD = str(REPO / "tests" / "reliability" / "kill_build.py")
SHORT_BOUNDS = {"MARINBUILD_GCS_REQUEST_TIMEOUT": "1", "MARINBUILD_GCS_RETRY_DEADLINE": "2"}
"""Per-request timeout and retry deadline (seconds) for the hung-server tests: the same code path as the defaults
(15 s and 30 s), shorter so the tests end quickly."""


def _result(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


def test_a_bucket_that_never_answers_fails_the_build_with_an_error_naming_the_request(gs_prefix, proxy):
    proxy.activate()
    proxy.configure(hang=True)
    done = subprocess.run(
        [sys.executable, KILL_BUILD, gs_prefix],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **SHORT_BOUNDS},
    )
    assert done.returncode == 1, done.stderr
    error = _result(done.stdout)["error"]
    assert error.startswith("StoreUnreachableError: "), error
    assert f"no answer from {proxy.url} after" in error and gs_prefix.split("/")[2] in error, error


def test_steps_committed_before_the_bucket_stopped_answering_are_reported_built(gs_prefix, proxy):
    """Step a writes SUCCESS, then the bucket stops answering before its lease is released: a is reported built
    (what storage says), the build fails on the steps after it, and no process hangs."""
    proxy.activate()
    proc = subprocess.Popen(
        [sys.executable, KILL_BUILD, gs_prefix],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            **SHORT_BOUNDS,
            "MARINBUILD_FAULT_SIGNAL": "STOP",
            "MARINBUILD_KILL_AT_POINT": "1:committed",
        },
    )
    try:
        while _state(proc.pid) != "T":
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.01)
        proxy.configure(hang=True)
        os.kill(proc.pid, signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    result = _result(out)
    assert proc.returncode == 1 and "a" in result["succeeded"] and "a" not in result["failed"], (result, err)
    proxy.configure(hang=False)
    (a_folder,) = [p for p in _folders(gs_prefix) if p.rsplit("/", 1)[1].startswith("a-")]
    assert st.read_status(a_folder) == st.STATUS_SUCCESS


def _folders(prefix: str) -> list[str]:
    from marinbuild.store import fs

    return ["gs://" + p for p in fs.filesystem_for(prefix).ls(prefix, detail=False)]


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_an_unparsable_lease_is_taken_over_once_it_is_older_than_the_stale_time(gs_prefix):
    from marinbuild.store import fs
    from marinbuild.store.lease import lease_path
    from marinbuild.store.lease_factory import lease_for

    out = gs_prefix + "/torn-000000"
    fs.write_atomic(lease_path(out), b'{"worker_id": "w", "timestamp": 1}}')
    lease = lease_for(out, "runner-b", stale_after=0.5)
    assert not lease.try_acquire()  # just written: its writer may still replace it
    time.sleep(0.6)
    assert lease.try_acquire()
    assert lease.holder().worker_id == "runner-b"
    lease.release()
