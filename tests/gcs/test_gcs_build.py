"""Builds on a gs:// prefix (fake-gcs-server): races, crashes, faults, damaged files, collisions, sharing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gcs_pipelines as gp
import pipelines as pl
import pytest

from marinbuild.executor import StepFailedError
from marinbuild.store import action_cache, fs, gcs, manifest, records
from marinbuild.store import status as st
from marinbuild.store.action_cache import ActionCacheCollisionError
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path
from marinbuild.store.status import DamagedFileError

HERE = Path(__file__).parent
REPO = HERE.parent.parent


@pytest.fixture(autouse=True)
def clear_calls():
    gp.CALLS.clear()


def _env(log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), str(REPO), env.get("PYTHONPATH", "")])
    env["MARINBUILD_TEST_CALL_LOG"] = str(log)
    return env


def _text(url: str) -> str:
    data = fs.read_bytes(url)
    assert data is not None, url
    return data.decode()


def test_build_commits_outputs_manifest_record_then_status(gs_prefix):
    a = gp.step("demo/a", "hello", extra_files=3)
    b = gp.step("demo/b", "world", inputs=[a])
    ex = gp.executor(gs_prefix)
    ex.run([b])
    out_a, out_b = ex.output_paths[a], ex.output_paths[b]
    assert _text(out_b + "/out.txt") == "hello+world"
    assert st.read_status(out_a) == st.read_status(out_b) == st.STATUS_SUCCESS
    m = manifest.read_manifest(out_a)
    assert sorted(f.path for f in m.files) == ["out.txt", "parts/part-0.txt", "parts/part-1.txt", "parts/part-2.txt"]
    assert all(f.xxh3_128 and f.crc32c for f in m.files)
    digest = action_cache.version_digest(ex.version_strs[a])
    record = action_cache.read_record(out_a, digest)
    assert record.manifest_digest == m.digest() and record.name == "demo/a"
    assert records.read_artifact(out_b) == {"text": "hello+world"}
    assert fs.read_bytes(lease_path(out_a)) is None
    assert json.loads(_text(out_a + "/.executor_info"))["output_path"] == out_a  # Marin's files, unchanged

    gp.CALLS.clear()
    again = gp.executor(gs_prefix)
    again.run([gp.step("demo/b", "world", inputs=[gp.step("demo/a", "hello", extra_files=3)])])
    assert gp.CALLS == [] and again.outcome.ran == []


def test_eight_processes_race_on_one_step_and_it_runs_once(gs_prefix, tmp_path):
    log = tmp_path / "calls.log"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "gcs_pipelines.py"), gs_prefix, "race"],
            env=_env(log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    calls = log.read_text().split()
    assert len(calls) == 1, calls
    assert st.read_status(calls[0]) == st.STATUS_SUCCESS
    assert _text(calls[0] + "/out.txt") == "r"
    assert fs.read_bytes(lease_path(calls[0])) is None


def test_two_processes_sharing_an_ancestor_run_it_once(gs_prefix, tmp_path):
    log = tmp_path / "calls.log"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "gcs_pipelines.py"), gs_prefix, "graph", tag],
            env=_env(log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("one", "two")
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    calls = log.read_text().split()
    assert len([c for c in calls if "/shared/root-" in c]) == 1 and len(calls) == 3, calls


def test_sigkilled_runner_leaves_no_success_and_the_next_run_completes(gs_prefix, tmp_path):
    log = tmp_path / "calls.log"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "gcs_pipelines.py"), gs_prefix, "hang"],
        env=_env(log),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STARTED", proc.stderr.read() if proc.stderr else ""
    finally:
        proc.kill()
        proc.wait()
    victim = gp.step("victim", "v")
    ex = gp.executor(gs_prefix, stale_after=2.0, heartbeat_interval=0.2)
    ex.compute_version(victim)
    out = ex.output_paths[victim]
    assert st.read_status(out) == st.STATUS_RUNNING
    assert fs.read_bytes(out + "/partial.txt") == b"half"
    assert fs.read_bytes(lease_path(out)) is not None
    assert manifest.read_manifest(out) is None
    ex.run([victim])  # waits for the dead runner's lease to go stale, then takes it over
    assert st.read_status(out) == st.STATUS_SUCCESS
    assert _text(out + "/out.txt") == "v"
    assert fs.read_bytes(lease_path(out)) is None


def test_builds_finish_correctly_while_20_percent_of_requests_fail(gs_prefix, proxy):
    proxy.activate()
    proxy.configure(fail_rate=0.2, seed=1234)
    a = gp.step("faulty/a", "a")
    b = gp.step("faulty/b", "b", inputs=[a])
    c = gp.step("faulty/c", "c", inputs=[a], extra_files=2)
    d = gp.step("faulty/d", "d", inputs=[b, c])
    ex = gp.executor(gs_prefix, heartbeat_interval=0.3, stale_after=10.0)
    ex.run([d])
    assert sorted(gp.CALLS) == sorted(ex.output_paths[s] for s in (a, b, c, d))  # each ran exactly once
    assert _text(ex.output_paths[d] + "/out.txt") == "a+b+a+c+d"
    stats = proxy.stats()
    assert stats["failed"] > 10, stats

    from marinbuild.cache.verify import verify_outputs

    assert [s.state for s in verify_outputs([ex.output_paths[s] for s in (a, b, c, d)]).steps] == ["ok"] * 4
    gp.CALLS.clear()
    again = gp.executor(gs_prefix)
    again.run([d])
    assert gp.CALLS == []


def test_garbage_status_is_an_error_naming_the_file(gs_prefix):
    a = gp.step("dmg/a")
    ex = gp.executor(gs_prefix)
    ex.compute_version(a)
    fs.write_atomic(st.status_path(ex.output_paths[a]), b"GARBAGE!")
    with pytest.raises(DamagedFileError, match=r"gs://.*/dmg/a-[0-9a-f]{6}/\.executor_status"):
        gp.executor(gs_prefix).run([a])
    assert gp.CALLS == []
    fs.write_atomic(st.status_path(ex.output_paths[a]), b"\xff\xfe")
    with pytest.raises(DamagedFileError, match=r"\.executor_status: status file is not UTF-8"):
        gp.executor(gs_prefix).run([a], dry_run=True)


def test_a_garbage_lease_is_stale_once_older_than_the_stale_time(gs_prefix):
    a = gp.step("dmg/lease")
    ex = gp.executor(gs_prefix)
    ex.compute_version(a)
    out = ex.output_paths[a]
    st.write_status(out, st.STATUS_RUNNING)
    fs.write_atomic(lease_path(out), b"{not json")
    gp.executor(gs_prefix).run([a], dry_run=True)  # planning is not stopped by it: the step counts as abandoned
    st.write_status(out, st.STATUS_FAILED)
    gp.executor(gs_prefix, stale_after=1.0).run([a])  # waits until the garbage is older than 1 s, then runs it
    assert gp.CALLS == [out]
    assert st.read_status(out) == st.STATUS_SUCCESS


def test_a_live_lease_on_gcs_is_reported_as_running_elsewhere(gs_prefix):
    a = gp.step("busy/a")
    ex = gp.executor(gs_prefix)
    ex.compute_version(a)
    st.write_status(ex.output_paths[a], st.STATUS_RUNNING)
    fs.write_atomic(lease_path(ex.output_paths[a]), encode_lease(LeaseRecord("other-host-1", 1e12)))
    ex.run([a], dry_run=True)
    assert ex.plan.steps[a].state == "running" and ex.plan.steps[a].lease.worker_id == "other-host-1"


def test_a_path_hash_collision_fails_loudly(gs_prefix):
    a = gp.step("coll/a", "one")
    ex = gp.executor(gs_prefix)
    ex.run([a])
    out = ex.output_paths[a]
    pl.pretend_another_version_built(out, ex.version_strs[a], "f" * 64)
    with pytest.raises(ActionCacheCollisionError, match="collision at .*coll/a-"):
        gp.executor(gs_prefix).run([gp.step("coll/a", "one")])
    # At commit too: the status is gone, the other version's record is still there.
    fs.remove(st.status_path(out))
    with pytest.raises(StepFailedError) as info:
        gp.executor(gs_prefix).run([gp.step("coll/a", "one")])
    assert isinstance(info.value.__cause__, ActionCacheCollisionError)
    assert st.read_status(out) != st.STATUS_SUCCESS


def test_marin_built_steps_without_records_are_used(gs_prefix):
    a = gp.step("marin/a")
    ex = gp.executor(gs_prefix)
    ex.compute_version(a)
    st.write_status(ex.output_paths[a], st.STATUS_SUCCESS)
    ex.run([a])
    assert gp.CALLS == []


def test_two_workspaces_share_one_gs_prefix(gs_prefix, tmp_path):
    """Two machines (separate workspaces): the second builds nothing the first built."""
    calls = tmp_path / "calls.log"

    def build(ws: Path, target: str) -> list[str]:
        calls.write_text("")
        env = _env(tmp_path / "unused.log")
        env["MB_CALLS"] = str(calls)
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from marinbuild.cli import main; sys.exit(main())",
                target,
                "--prefix",
                gs_prefix,
            ],
            cwd=ws,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        return [Path(p).name.rsplit("-", 1)[0] for p in calls.read_text().split()]

    one, two = gp.workspace(tmp_path / "one"), gp.workspace(tmp_path / "two")
    assert build(one, "//pipe:b") == ["a", "b"]
    assert build(two, "//pipe:b") == []
    assert build(two, "//pipe:other") == ["other"]
    assert build(one, "//pipe:other") == []
    out_b = gcs.filesystem().glob(gs_prefix + "/pipe/b-*/out.txt")
    assert len(out_b) == 1 and gcs.filesystem().cat_file(out_b[0]) == b"A+B"


def test_run_info_is_uploaded_whole_and_named_by_its_steps(gs_prefix):
    """The run info on an object store: one object, named by its steps' output paths."""
    a = gp.step("demo/a", "hello")
    b = gp.step("demo/b", "world", inputs=[a])
    ex = gp.executor(gs_prefix)
    ex.run([b])
    path = ex.executor_info_path
    assert path is not None and path.startswith(gs_prefix + "/experiments/")
    written = json.loads(_text(path))
    assert [s["name"] for s in written["steps"]] == ["demo/a", "demo/b"]
    assert written["prefix"] == gs_prefix
    assert fs.filesystem_for(path).ls(gs_prefix + "/experiments", detail=False) == [path.split("://", 1)[1]]
