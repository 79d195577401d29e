"""Leftovers: a commit that cannot write (a full disk) leaves FAILED, not RUNNING; a lease left beside SUCCESS by a
runner killed after its commit is found and removed by ``cache verify --repair``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import harness as h
import pytest

from marinbuild.store import status as st
from marinbuild.store.lease_factory import lease_for

ONE_STEP = textwrap.dedent("""
    import os, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sys.path[:0] = [{here!r}, os.path.dirname({here!r})]
    import pipelines as pl
    from soak_steps import write_then_fill_the_disk
    from marinbuild.executor import Executor
    prefix = sys.argv[1]
    step = pl.step("full", "F", fn=write_then_fill_the_disk)
    Executor(prefix=prefix, executor_info_base_path=prefix + "-info", listeners=[]).run([step])
""").format(here=os.path.dirname(os.path.abspath(__file__)))


def _build_one(prefix: str, **env: str) -> subprocess.CompletedProcess:
    os.makedirs(prefix + "-info")  # (also its working folder: ``python -c`` imports from there first)
    return subprocess.run(
        [sys.executable, "-c", ONE_STEP, prefix],
        capture_output=True,
        text=True,
        cwd=prefix + "-info",
        timeout=h.RUN_TIMEOUT,
        env={**os.environ, **env},
    )


def test_a_commit_that_cannot_write_marks_the_step_failed(tmp_path):
    prefix = str(tmp_path / "p")
    done = _build_one(prefix)
    assert done.returncode == 1, done.stderr
    folder = h.step_folder(prefix, "full")
    assert st.read_status(folder) == st.STATUS_FAILED
    assert lease_for(folder, "reader").holder() is None


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs (needs the right to mount: root in a container that allows it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    yield str(mount)
    subprocess.run(["umount", "-l", str(mount)], check=True)


def test_a_disk_that_fills_during_the_commit_leaves_failed_not_running(small_disk):
    prefix = os.path.join(small_disk, "p")
    done = _build_one(prefix, MARINBUILD_FILL_DISK="1")
    assert done.returncode == 1, done.stderr
    folder = h.step_folder(prefix, "full")
    assert open(st.status_path(folder), "rb").read().split() == [b"FAILED"]  # padded in place: no block to spare
    assert st.read_status(folder) == st.STATUS_FAILED
