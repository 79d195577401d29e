"""The Marin-compatible executor on a real local filesystem."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pipelines as pl
import pytest

from marinbuild.executor import (
    Executor,
    ExecutorMainConfig,
    ExecutorStep,
    InputName,
    PreviousStepFailedError,
    PreviousTaskFailedError,
    StepFailedError,
    executor_main,
    output_path_of,
    this_output_path,
    versioned,
)
from marinbuild.store import records
from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path

TESTS = Path(__file__).parent


def make_executor(prefix: str, **kwargs: Any) -> Executor:
    kwargs.setdefault("listeners", [])
    return Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), **kwargs)


@pytest.fixture(autouse=True)
def clear_calls():
    pl.CALLS.clear()
    yield


def read(path: str, name: str = "out.txt") -> str:
    return Path(path, name).read_text()


def test_a_to_b_pipeline_writes_marin_files(prefix):
    a = pl.step("demo/a", "hello")
    b = pl.step("demo/b", "world", inputs=[a])
    ex = make_executor(prefix)
    paths = ex.run([b])
    pa, pb = paths[a], paths[b]
    assert pa.startswith(os.path.join(prefix, "demo/a-")) and len(pa) == len(os.path.join(prefix, "demo/a-")) + 6
    assert read(pb) == "hello+world"
    assert st.read_status(pa) == st.read_status(pb) == "SUCCESS"
    assert Path(pb, ".executor_status").read_text() == "SUCCESS"
    info = json.loads(Path(pb, ".executor_info").read_text())
    assert list(info) == ["name", "fn_name", "config", "override_output_path", "version", "dependencies", "output_path"]
    assert info["name"] == "demo/b"
    assert info["fn_name"] == "pipelines.write_text"
    assert info["dependencies"] == [pa]
    assert info["config"]["inputs"] == [pa] and info["config"]["output_path"] == pb
    assert info["version"] == ex.versions[b]
    assert json.loads(Path(pb, ".artifact.json").read_text()) == {"text": "hello+world"}
    assert not Path(pb, ".executor_status.lock").exists()
    run_infos = list(Path(prefix, "experiments").glob("*.json"))
    assert len(run_infos) == 1
    run_info = json.loads(run_infos[0].read_text())
    assert [s["name"] for s in run_info["steps"]] == ["demo/a", "demo/b"]
    assert run_info["prefix"] == prefix


def test_run_info_is_named_by_its_output_paths_and_filled_as_marin_does(prefix):
    """``<script>-<md5 of the sorted output paths under the prefix>[:6].json`` with every step's info, in Marin's
    schema."""
    import dataclasses
    import hashlib

    from marinbuild.core.jsonenc import MarinJsonEncoder

    a = pl.step("demo/a", "hello")
    b = pl.step("demo/b", "world", inputs=[a])
    ex = make_executor(prefix)
    ex.run([b])
    infos = []
    for info in ex.step_infos:
        d = dataclasses.asdict(info)
        d.pop("description", None)
        infos.append(d)
    paths = "\n".join(sorted(os.path.relpath(info["output_path"], prefix) for info in infos))
    assert ex.executor_info_path.endswith(f"-{hashlib.md5(paths.encode()).hexdigest()[:6]}.json")
    written = json.loads(Path(ex.executor_info_path).read_text())
    assert json.loads(json.dumps(infos, cls=MarinJsonEncoder)) == written["steps"]
    assert list(written) == ["worker_id", "git_commit", "caller_path", "created_date", "user", "prefix", "steps"]
    assert oct(os.stat(ex.executor_info_path).st_mode & 0o777) == oct(0o644)


def test_rerun_is_a_noop_and_info_is_identical(prefix):
    a = pl.step("demo/a", "hello")
    make_executor(prefix).run([a])
    info_before = Path(make_executor(prefix).run([a])[a], ".executor_info").read_text()
    pl.CALLS.clear()
    a2 = pl.step("demo/a", "hello")
    ex = make_executor(prefix)
    ex.run([a2])
    assert pl.CALLS == []
    assert ex.outcome.ran == []
    assert Path(ex.output_paths[a2], ".executor_info").read_text() == info_before
    assert len(list(Path(prefix, "experiments").glob("*.json"))) == 1


def _paths(**overrides: Any) -> tuple[str, str]:
    upstream_text = overrides.get("upstream", "u")
    a = pl.step("p/a", upstream_text)
    name = output_path_of(a, overrides["sub"]) if "sub" in overrides else output_path_of(a)

    @dataclass(frozen=True)
    class C:
        inp: Any
        v: Any
        plain: Any

    b = ExecutorStep(
        name="p/b", fn=None, config=C(inp=name, v=versioned(overrides.get("v", 1)), plain=overrides.get("plain", 1))
    )
    ex = make_executor("/pfx")
    ex.compute_version(b)
    return ex.output_paths[a], ex.output_paths[b]


def test_what_changes_an_output_path():
    base_a, base_b = _paths()
    assert _paths(v=2)[1] != base_b  # a versioned field
    assert _paths(upstream="u2")[1] != base_b and _paths(upstream="u2")[0] != base_a  # an upstream versioned field
    assert _paths(sub="x")[1] != base_b  # a subpath of an input
    assert _paths(plain=2) == (base_a, base_b)  # an unversioned field does not


def test_equal_versions_are_deduplicated(prefix):
    a1 = pl.step("dup/a", "same")
    a2 = pl.step("dup/a", "same")
    b = pl.step("dup/b", "b", inputs=[a1, a2])
    ex = make_executor(prefix)
    ex.run([b])
    assert ex.steps == [a1, b]
    assert ex.canonicalize(a2) is a1
    assert ex.output_paths[a1] == ex.output_paths[a2]
    assert pl.CALLS.count(ex.output_paths[a1]) == 1


def test_failure_stops_dependents_not_independent_steps(prefix):
    bad = pl.step("f/bad", fn=pl.fail_always)
    after_bad = pl.step("f/after", inputs=[bad])
    after_after = pl.step("f/after2", inputs=[after_bad])
    independent = pl.step("f/independent", "ok")
    ex = make_executor(prefix)
    with pytest.raises(StepFailedError) as info:
        ex.run([after_after, independent])
    err = info.value
    assert "f/bad" in str(err) and "DEP_FAILED" in str(err)
    assert set(err.dep_failed) == {"f/after", "f/after2"}
    assert isinstance(err.__cause__, RuntimeError) and "boom" in str(err.__cause__)
    assert st.read_status(ex.output_paths[bad]) == "FAILED"
    assert st.read_status(ex.output_paths[independent]) == "SUCCESS"
    assert st.read_status(ex.output_paths[after_bad]) is None
    assert not Path(ex.output_paths[bad], ".executor_status.lock").exists()


def test_force_run_failed_both_ways(prefix):
    bad = pl.step("ff/s", fn=pl.fail_always)
    with pytest.raises(StepFailedError):
        make_executor(prefix).run([bad])
    fixed = pl.step("ff/s")  # same version, now a working function
    with pytest.raises(PreviousStepFailedError, match="failed previously"):
        make_executor(prefix).run([fixed], force_run_failed=False)
    assert pl.CALLS == [make_executor(prefix).run([fixed], dry_run=True)[fixed]]  # only the first failing call
    paths = make_executor(prefix).run([fixed], force_run_failed=True)
    assert st.read_status(paths[fixed]) == "SUCCESS"


def test_run_only_selects_steps_and_what_they_need(prefix):
    a = pl.step("ro/a")
    b = pl.step("ro/b", inputs=[a])
    c = pl.step("ro/c", inputs=[b])
    other = pl.step("ro/other")
    ex = make_executor(prefix)
    ex.run([c, other], run_only=["ro/b$"])
    assert sorted(pl.CALLS) == sorted([ex.output_paths[a], ex.output_paths[b]])
    assert st.read_status(ex.output_paths[c]) is None


def test_pseudo_dependencies_are_hashed_but_not_run(prefix):
    parent = pl.step("ps/parent", "p")

    @dataclass(frozen=True)
    class C:
        ckpt: Any
        output_path: Any

    child = ExecutorStep(
        name="ps/child",
        fn=_touch,
        config=C(ckpt=output_path_of(parent, "ckpt").nonblocking(), output_path=this_output_path()),
    )
    ex = make_executor(prefix)
    ex.run([child])
    assert ex.versions[child]["pseudo_dependencies"] == [ex.versions[parent]]
    assert ex.is_pseudo_dep[parent] is True
    assert st.read_status(ex.output_paths[parent]) is None
    assert st.read_status(ex.output_paths[child]) == "SUCCESS"

    # A blocking consumer of the same parent makes it run.
    consumer = pl.step("ps/consumer", inputs=[parent])
    ex2 = make_executor(prefix)
    ex2.run([child, consumer])
    assert ex2.is_pseudo_dep[parent] is False
    assert st.read_status(ex2.output_paths[parent]) == "SUCCESS"


def _touch(config: Any) -> None:
    os.makedirs(config.output_path, exist_ok=True)


def test_dry_run_reads_statuses_and_writes_nothing(prefix):
    a = pl.step("dr/a")
    b = pl.step("dr/b", inputs=[a])
    make_executor(prefix).run([a])
    before = sorted(str(p) for p in Path(prefix).rglob("*"))
    ex = make_executor(prefix)
    ex.run([b], dry_run=True)
    assert sorted(str(p) for p in Path(prefix).rglob("*")) == before
    assert ex.plan.steps[a].state == "built"
    assert ex.plan.steps[b].state == "missing"
    assert ex.plan.to_run == [b]
    assert pl.CALLS == [ex.output_paths[a]]


def test_dry_run_reports_running_elsewhere_and_failed(prefix):
    running = pl.step("dr2/running")
    failed = pl.step("dr2/failed")
    ex = make_executor(prefix)
    ex.compute_version(running)
    ex.compute_version(failed)
    st.write_status(ex.output_paths[running], "RUNNING")
    Path(lease_path(ex.output_paths[running])).write_bytes(encode_lease(LeaseRecord("other-host-1", 1e12)))
    st.write_status(ex.output_paths[failed], "FAILED")
    ex.run([running, failed], dry_run=True)
    assert ex.plan.steps[running].state == "running"
    assert ex.plan.steps[running].lease.worker_id == "other-host-1"
    assert ex.plan.steps[failed].state == "failed"


def test_existing_marin_prefix_is_recognised_as_built(prefix):
    """Status files written by Marin (one word, or the legacy JSON lines) mean built."""
    a = pl.step("legacy/a")
    b = pl.step("legacy/b", inputs=[a])
    ex = make_executor(prefix)
    ex.compute_version(b)
    os.makedirs(ex.output_paths[a])
    Path(ex.output_paths[a], ".executor_status").write_text(
        '{"date": "2024-01-01", "status": "RUNNING"}\n{"date": "2024-01-02", "status": "SUCCESS"}\n'
    )
    os.makedirs(ex.output_paths[b])
    Path(ex.output_paths[b], ".executor_status").write_text("SUCCESS")
    make_executor(prefix).run([b])
    assert pl.CALLS == []


def test_max_concurrent_caps_parallelism(prefix):
    active = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()

    def tracked(config: Any) -> None:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
            if active == 2:
                release.set()
        release.wait(10)  # the first two wait for each other, however slow the machine
        with lock:
            active -= 1

    steps = [ExecutorStep(name=f"mc/{i}", fn=tracked, config={"i": versioned(i)}) for i in range(8)]
    make_executor(prefix).run(steps, max_concurrent=2)
    assert peak == 2
    with pytest.raises(ValueError):
        make_executor(prefix).run(steps, max_concurrent=0)


def test_ten_executors_in_threads_run_a_step_once(prefix):
    barrier = threading.Barrier(10)
    errors = []

    def build() -> None:
        try:
            target = pl.step("race/one", "r", sleep=0.3)
            barrier.wait()
            make_executor(prefix).run([target])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(pl.CALLS) == 1
    assert st.read_status(pl.CALLS[0]) == "SUCCESS"


def _subprocess_env(log: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")
    env["MARINBUILD_TEST_CALL_LOG"] = str(log)
    return env


def test_two_processes_sharing_an_ancestor_run_it_once(prefix, tmp_path):
    log = tmp_path / "calls.log"
    procs = [
        subprocess.Popen(
            [sys.executable, str(TESTS / "pipelines.py"), prefix, "shared", tag],
            env=_subprocess_env(log),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("one", "two")
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    calls = log.read_text().split()
    roots = [c for c in calls if "/shared/root-" in c]
    assert len(roots) == 1, calls
    assert len(calls) == 3


def test_sigkilled_runner_leaves_no_success_and_is_taken_over(prefix, tmp_path):
    log = tmp_path / "calls.log"
    proc = subprocess.Popen(
        [sys.executable, str(TESTS / "pipelines.py"), prefix, "hang"],
        env=_subprocess_env(log),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "STARTED"
    finally:
        proc.kill()
        proc.wait()
    victim = pl.step("victim", "v")
    ex = make_executor(prefix, stale_after=2.0, heartbeat_interval=0.2)
    ex.compute_version(victim)
    out = ex.output_paths[victim]
    assert st.read_status(out) == "RUNNING"
    assert Path(out, "partial.txt").exists()
    assert Path(lease_path(out)).exists()
    ex.run([victim])  # waits for the dead runner's lease to go stale, then takes it over
    assert st.read_status(out) == "SUCCESS"
    assert read(out) == "v"
    assert not Path(lease_path(out)).exists()


def test_lost_lease_never_writes_success(prefix):
    def usurped(config: Any) -> None:
        Path(lease_path(config["output_path"])).write_bytes(encode_lease(LeaseRecord("usurper", 1e12)))

    s = ExecutorStep(name="lost/s", fn=usurped, config={"output_path": this_output_path(), "v": versioned(1)})
    ex = make_executor(prefix)
    with pytest.raises(StepFailedError, match="lost/s"):
        ex.run([s])
    out = ex.output_paths[s]
    assert st.read_status(out) == "RUNNING"
    assert not Path(out, ".artifact.json").exists()
    assert json.loads(Path(lease_path(out)).read_text())["worker_id"] == "usurper"


def test_heartbeat_keeps_a_long_step_leased(prefix):
    s = pl.step("hb/slow", sleep=1.2)
    ex = make_executor(prefix, heartbeat_interval=0.1, stale_after=0.5)
    ex.run([s])
    assert st.read_status(ex.output_paths[s]) == "SUCCESS"


def test_long_chain_needs_no_recursion(prefix):
    steps: list[ExecutorStep] = []
    for i in range(10_000):
        steps.append(
            ExecutorStep(
                name=f"chain/{i}",
                fn=None,
                config={"prev": output_path_of(steps[-1]) if steps else None, "i": versioned(i)},
            )
        )
    ex = make_executor("/pfx")
    ex.compute_version(steps[-1])
    assert len(ex.steps) == 10_000
    assert ex.versions[steps[-1]]["dependencies"] == [f"chain/9998-{ex.hashed_versions[steps[-2]]}"]


def test_cold_chain_of_1000_steps_runs(prefix):
    steps: list[ExecutorStep] = []
    for i in range(1000):
        steps.append(pl.step(f"c/{i}", str(i % 10), inputs=steps[-1:]))
    ex = make_executor(prefix)
    ex.run([steps[-1]])
    assert len(ex.outcome.ran) == 1000
    assert st.read_status(ex.output_paths[steps[-1]]) == "SUCCESS"


def test_executor_main_parses_marin_flags(prefix):
    a = pl.step("main/a")
    ex = executor_main(steps=[a], args=["--prefix", prefix, "--dry_run", "true"])
    assert ex.plan.steps[a].state == "missing"
    assert not Path(ex.output_paths[a]).exists()
    ex = executor_main(ExecutorMainConfig(prefix=prefix, max_concurrent=1), steps=[a])
    assert st.read_status(ex.output_paths[a]) == "SUCCESS"
    assert Path(ex.executor_info_path).parent == Path(prefix, "experiments")


def test_executor_main_spares_the_exit_collection(tmp_path):
    """After executor_main, the objects alive at exit are frozen before the final collection, and only then."""
    script = tmp_path / "script.py"
    script.write_text(
        "import atexit, gc, os, sys\n"
        "atexit.register(lambda: os.write(1, f'at exit {gc.get_freeze_count() > 0}\\n'.encode()))\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import pipelines as pl\n"
        "from marinbuild.executor import executor_main\n"
        "executor_main(steps=[pl.step('exit/a')], args=['--prefix', sys.argv[1]])\n"
        "print('after run', gc.get_freeze_count() > 0)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "p")], capture_output=True, text=True, check=True
    )
    assert done.stdout.split("\n")[:2] == ["after run False", "at exit True"]


def test_prefix_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MARIN_PREFIX", str(tmp_path / "env_prefix"))
    a = pl.step("env/a")
    ex = executor_main(steps=[a], args=[])
    assert ex.output_paths[a].startswith(str(tmp_path / "env_prefix"))


def test_hardcoded_inputs_resolve_under_the_prefix(prefix):
    seen = {}

    def capture(config: Any) -> None:
        seen.update(config)

    s = ExecutorStep(
        name="hc/s",
        fn=capture,
        config={"raw": InputName.hardcoded("raw/data"), "abs": InputName.hardcoded("/abs/data")},
    )
    make_executor(prefix).run([s])
    assert seen == {"raw": os.path.join(prefix, "raw/data"), "abs": "/abs/data"}


def test_damaged_status_file_is_an_error_naming_it(prefix):
    a = pl.step("dmg/a")
    ex = make_executor(prefix)
    ex.compute_version(a)
    os.makedirs(ex.output_paths[a])
    Path(ex.output_paths[a], ".executor_status").write_text("GARBAGE!")
    with pytest.raises(st.DamagedFileError, match=r"\.executor_status"):
        make_executor(prefix).run([a])
    assert records.read_artifact(ex.output_paths[a]) is None


def test_executor_main_parses_marins_flags_through_draccus(prefix):
    """``--prefix``, ``--dry_run true``, ``--run_only '["..."]'``, ``--max_concurrent 2``, ``--force_run_failed false``
    each reach the run, as Marin's draccus-parsed ``executor_main`` gives them."""
    a, b = pl.step("flags/a"), pl.step("flags/b")
    argv = ["--prefix", prefix, "--dry_run", "true", "--run_only", '["flags/a"]', "--max_concurrent", "2"]
    ex = executor_main(steps=[a, b], args=[*argv, "--force_run_failed", "false"])
    assert ex.prefix == prefix and ex.output_paths[a].startswith(prefix + "/flags/a-")
    assert list(ex.plan.steps) == [a]  # run_only
    assert not Path(ex.output_paths[a]).exists()  # dry run
    st.write_status(ex.output_paths[a], st.STATUS_FAILED)
    with pytest.raises(PreviousTaskFailedError, match="flags/a"):
        executor_main(steps=[a, b], args=[*argv, "--force_run_failed", "false"])
    assert executor_main(steps=[a, b], args=argv).plan.steps[a].state == "failed"  # force_run_failed: true
    with pytest.raises(ValueError, match="max_concurrent must be a positive integer, got 0"):
        executor_main(steps=[a], args=["--prefix", prefix, "--max_concurrent", "0"])


def test_version_str_to_step_is_marins_index(prefix):
    """Filled on first read: every distinct version string maps to the step that stands for it."""
    a = pl.step("idx/a", "same")
    a_again = pl.step("idx/a", "same")  # equal version: deduplicated onto ``a``
    b = pl.step("idx/b", "other", inputs=[a])
    ex = make_executor(prefix)
    for s in (a, a_again, b):
        ex.compute_version(s)
    assert len(ex.version_str_to_step) == 2
    assert ex.version_str_to_step[ex.version_strs[a_again]] is a
    assert ex.version_str_to_step[ex.version_strs[b]] is b
    assert ex.canonicalize(a_again) is a
    c = pl.step("idx/c", "late")
    ex.compute_version(c)  # computed after the first read: still found
    assert ex.version_strs[c] in ex.version_str_to_step
    assert set(ex.version_str_to_step.values()) == {a, b, c}


def test_compute_versions_matches_one_by_one(prefix):
    steps = [pl.step("cv/a", "a")]
    steps.append(pl.step("cv/b", "b", inputs=[steps[0]]))
    one, many = make_executor(prefix), make_executor(prefix)
    for s in steps:
        one.compute_version(s)
    many.compute_versions(steps)
    assert [one.output_paths[s] for s in steps] == [many.output_paths[s] for s in steps]
    import gc

    assert gc.isenabled()


def test_a_path_hash_collision_fails_at_commit_on_a_local_prefix(prefix):
    """A record of another version at the step's path (found in the listing the manifest makes) fails the commit;
    at an overridden path the other version's record is replaced instead."""
    from marinbuild.store import action_cache

    a = pl.step("lcoll/a", "one")
    ex = make_executor(prefix)
    ex.run([a])
    out = ex.output_paths[a]
    pl.pretend_another_version_built(out, ex.version_strs[a], "e" * 64)
    os.remove(st.status_path(out))
    with pytest.raises(StepFailedError) as info:
        make_executor(prefix).run([pl.step("lcoll/a", "one")])
    assert isinstance(info.value.__cause__, action_cache.ActionCacheCollisionError)
    assert st.read_status(out) != st.STATUS_SUCCESS

    b = pl.step("lcoll/b", "one")
    b = ExecutorStep(name=b.name, fn=b.fn, config=b.config, override_output_path="fixed/b")
    ex = make_executor(prefix)
    ex.run([b])
    out = ex.output_paths[b]
    ours = action_cache.version_digest(ex.version_strs[b])
    action_cache.write_record(
        action_cache.ActionRecord(**{**action_cache.read_record(out, ours).__dict__, "version_sha256": "d" * 64})
    )
    os.remove(st.status_path(out))
    make_executor(prefix).run([b])
    assert action_cache.digests_at(out) == {ours} and st.read_status(out) == st.STATUS_SUCCESS


def test_run_info_date_is_marins_isoformat_of_local_now():
    """``created_date`` has the form of Marin's ``datetime.now().isoformat()``."""
    from datetime import datetime

    ex = make_executor("/pfx")
    ex.compute_version(pl.step("date/a"))
    ex.get_infos()
    assert ex.executor_info is not None
    text = ex.executor_info.created_date
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?", text)
    assert abs((datetime.fromisoformat(text) - datetime.now()).total_seconds()) < 5


# -- Marin's API details ---------------------------------------------------------------------------


def test_previous_task_failed_error_is_marins_plain_exception(prefix):
    bad = pl.step("pt/s", fn=pl.fail_always)
    with pytest.raises(StepFailedError):
        make_executor(prefix).run([bad])
    with pytest.raises(PreviousTaskFailedError, match="failed previously") as raised:
        make_executor(prefix).run([pl.step("pt/s")], force_run_failed=False)
    assert not isinstance(raised.value, RuntimeError)  # Marin's is a plain Exception
    assert PreviousStepFailedError is PreviousTaskFailedError
    import marinbuild

    assert marinbuild.PreviousTaskFailedError is PreviousTaskFailedError


def test_executor_main_wrapped_takes_the_config_as_marins_does(prefix):
    import inspect

    wrapped = executor_main.__wrapped__
    assert list(inspect.signature(wrapped).parameters) == ["config", "steps", "description", "max_concurrent"]
    a = pl.step("wr/a")
    b = pl.step("wr/b", inputs=[a])
    ex = wrapped(ExecutorMainConfig(prefix=prefix, max_concurrent=4), [b], description="by hand", max_concurrent=1)
    assert st.read_status(ex.output_paths[b]) == "SUCCESS"
    assert ex.description == "by hand"
    ex = executor_main.__wrapped__(ExecutorMainConfig(prefix=prefix, dry_run=True), steps=[pl.step("wr/c")])
    assert ex.plan.to_run and not Path(ex.output_paths[ex.plan.to_run[0]]).exists()


def _info_text(ex: Executor, step: ExecutorStep) -> str:
    return Path(ex.output_paths[step], ".executor_info").read_text()


def test_steps_run_only_leaves_out_get_their_executor_info_as_in_marin(prefix):
    """Marin's ``write_infos`` writes every step's ``.executor_info`` before running any, run or not."""
    a = pl.step("ri/a")
    b = pl.step("ri/b", inputs=[a])
    c = pl.step("ri/c", inputs=[b])
    other = pl.step("ri/other")
    ex = make_executor(prefix)
    ex.run([c, other], run_only=["ri/b$"])
    assert st.read_status(ex.output_paths[b]) == "SUCCESS"
    texts = {step: _info_text(ex, step) for step in (c, other)}
    for step in (c, other):
        assert st.read_status(ex.output_paths[step]) is None
        info = json.loads(texts[step])
        assert info["name"] == step.name and info["output_path"] == ex.output_paths[step]
        assert info["version"] == ex.versions[step]
    assert sorted(os.listdir(ex.output_paths[c])) == [".executor_info"]
    ex.write_infos()  # Marin's write_infos: every step's print(json.dumps(info, indent=2))
    assert {step: _info_text(ex, step) for step in (c, other)} == texts


def test_pseudo_dependencies_get_their_executor_info_as_in_marin(prefix):
    parent = pl.step("pi/parent", "p")
    grandparent_of_nothing = pl.step("pi/root", "r")
    parent_with_root = pl.step("pi/parent2", "p2", inputs=[grandparent_of_nothing])

    @dataclass(frozen=True)
    class C:
        ckpt: Any
        other: Any
        output_path: Any

    child = ExecutorStep(
        name="pi/child",
        fn=_touch,
        config=C(
            ckpt=output_path_of(parent, "ckpt").nonblocking(),
            other=output_path_of(parent_with_root).nonblocking(),
            output_path=this_output_path(),
        ),
    )
    ex = make_executor(prefix)
    ex.run([child])
    assert st.read_status(ex.output_paths[child]) == "SUCCESS"
    for step in (parent, parent_with_root, grandparent_of_nothing):
        assert st.read_status(ex.output_paths[step]) is None
        assert json.loads(_info_text(ex, step))["version"] == ex.versions[step]
    # A no-op run (even with pseudo-dependencies) leaves the existing files as they are.
    stamp = os.stat(Path(ex.output_paths[parent], ".executor_info")).st_mtime_ns
    again = make_executor(prefix)
    again.run([child])
    assert again.outcome.ran == []
    assert os.stat(Path(ex.output_paths[parent], ".executor_info")).st_mtime_ns == stamp


def test_no_info_is_written_in_a_dry_run_nor_below_a_built_step(prefix):
    a = pl.step("nb/a")
    b = pl.step("nb/b", inputs=[a])
    other = pl.step("nb/other")
    ex = make_executor(prefix)
    ex.run([b, other], run_only=["nb/b$"], dry_run=True)
    assert not Path(ex.output_paths[other]).exists()
    make_executor(prefix).run([b])
    import shutil

    shutil.rmtree(ex.output_paths[a])  # a built step's dependency, deleted: not needed, not looked at
    make_executor(prefix).run([b, other], run_only=["nb/b$"])
    assert not Path(ex.output_paths[a]).exists()
    assert Path(ex.output_paths[other], ".executor_info").exists()


MARIN_EXECUTION_NAMES = [  # marin.execution's public names (its __init__), marin-core 0.2.20.dev202606180959
    "Executor",
    "ExecutorInfo",
    "ExecutorMainConfig",
    "compute_output_path",
    "executor_main",
    "materialize",
    "resolve_executor_step",
    "resolve_local_placeholders",
    "unwrap_versioned_value",
    "walk_config",
    "STATUS_DEP_FAILED",
    "STATUS_FAILED",
    "STATUS_RUNNING",
    "STATUS_SUCCESS",
    "THIS_OUTPUT_PATH",
    "ExecutorStep",
    "InputName",
    "OutputName",
    "VersionedValue",
    "ensure_versioned",
    "get_executor_step",
    "output_path_of",
    "this_output_path",
    "versioned",
]


def test_every_public_name_of_marin_execution_is_offered():
    import marinbuild
    import marinbuild.executor

    for name in MARIN_EXECUTION_NAMES:
        assert name in marinbuild.executor.__all__ and hasattr(marinbuild, name), name


@dataclass(frozen=True)
class _Cfg:
    output_path: Any
    text: Any = "x"


def _write_config(config: _Cfg) -> str:
    os.makedirs(config.output_path, exist_ok=True)
    Path(config.output_path, "out.txt").write_text(str(config.text))
    return str(config.text)


def test_resolve_executor_step_gives_marins_step_spec(prefix):
    from marinbuild.executor import remote, resolve_executor_step
    from marinbuild.executor.step_spec import StepSpec

    step = ExecutorStep(name="rs/a", fn=_write_config, config=_Cfg(output_path=this_output_path(), text=versioned("t")))
    ex = make_executor(prefix)
    ex.compute_version(step)
    out = ex.output_paths[step]
    dep = StepSpec(name="rs/dep", output_path_prefix=prefix)
    spec = resolve_executor_step(step, ex.configs[step], out, deps=[dep])
    assert isinstance(spec, StepSpec)
    assert (spec.name, spec.output_path, spec.deps, spec.dep_paths) == ("rs/a", out, [dep], [dep.output_path])
    assert spec.fn(out) == "t" and Path(out, "out.txt").read_text() == "t"

    wrapped = ExecutorStep(name="rs/b", fn=remote(_write_config, resources={"cpu": 2}), config=step.config)
    resolved = resolve_executor_step(wrapped, ex.configs[step], out)
    assert resolved.fn.resources == {"cpu": 2} and resolved.fn(out) == "t"  # the wrapper (and its resources) stays
    with pytest.raises(ValueError, match="no callable"):
        resolve_executor_step(ExecutorStep(name="rs/c", fn=None, config=None), None, out)


def test_step_spec_hash_and_paths_are_marins(prefix, monkeypatch):
    import hashlib

    from marinbuild.executor.step_spec import StepSpec

    monkeypatch.setenv("MARIN_PREFIX", prefix)
    dep = StepSpec(name="ss/dep", hash_attrs={"n": 1})
    spec = StepSpec(name="ss/top", deps=[dep], hash_attrs={"lr": 0.1})
    content = json.dumps({"name": "ss/dep", "attrs": {"n": 1}, "deps": []}, sort_keys=True)
    assert dep.name_with_hash == "ss/dep_" + hashlib.sha256(content.encode()).hexdigest()[:8]
    content = json.dumps({"name": "ss/top", "attrs": {"lr": 0.1}, "deps": [dep.name_with_hash]}, sort_keys=True)
    assert spec.output_path == f"{prefix}/ss/top_" + hashlib.sha256(content.encode()).hexdigest()[:8]
    assert StepSpec(name="x", override_output_path="rel/p").output_path == f"{prefix}/rel/p"
    assert StepSpec(name="x", override_output_path="gs://b/p").output_path == "gs://b/p"


def _spec_fn(output_path: str) -> str:
    os.makedirs(output_path, exist_ok=True)
    Path(output_path, "out.txt").write_text("spec")
    return output_path


def test_a_step_spec_runs_in_an_executor_graph_and_resolves_back(prefix):
    from marinbuild.executor import resolve_executor_step
    from marinbuild.executor.step_spec import StepSpec

    spec = StepSpec(name="sg/spec", output_path_prefix=prefix, hash_attrs={"k": 1}, fn=_spec_fn)
    as_step = spec.as_executor_step()
    consumer = ExecutorStep(
        name="sg/consumer",
        fn=_write_config,
        config=_Cfg(output_path=this_output_path(), text=output_path_of(as_step, "out.txt")),
    )
    ex = make_executor(prefix)
    ex.run([consumer])
    assert ex.output_paths[as_step] == spec.output_path
    assert Path(spec.output_path, "out.txt").read_text() == "spec"
    assert json.loads(Path(spec.output_path, ".artifact.json").read_text()) == spec.output_path
    assert st.read_status(ex.output_paths[consumer]) == "SUCCESS"
    back = resolve_executor_step(as_step, ex.configs[as_step], ex.output_paths[as_step])
    import dataclasses

    assert back == dataclasses.replace(spec, override_output_path=spec.output_path)  # Marin pins the path
    assert back.output_path == spec.output_path and back.fn is _spec_fn


def test_git_commit_is_heads_commit_also_in_a_worktree(tmp_path, monkeypatch):
    """The run info's ``git_commit``: what Marin's ``git rev-parse HEAD`` gives, in a checkout and in a worktree."""
    from marinbuild.executor import get_git_commit

    repo = tmp_path / "repo"
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q", str(repo)], check=True)
    (repo / "f").write_text("x")
    subprocess.run([*git, "-C", str(repo), "add", "f"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "-C", str(repo), "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt")], check=True)
    for where in (repo, tmp_path / "wt"):
        monkeypatch.chdir(where)
        expected = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout
        assert get_git_commit() == expected.strip()
    monkeypatch.chdir(tmp_path)
    assert get_git_commit() is None
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # a build started from a folder removed meanwhile: no commit, not an internal error
    assert get_git_commit() is None


def test_each_run_ends_its_lease_keeper(prefix):
    """A run is one build: its lease keeper (the thread renewing its leases) ends with it, none is left behind."""
    for i in range(2):
        before = set(threading.enumerate())
        make_executor(prefix).run([pl.step(f"keeper/{i}", "k")])
        keepers = [t for t in set(threading.enumerate()) - before if t.name == "marinbuild-lease-keeper"]
        for thread in keepers:
            thread.join(30)
        assert not any(thread.is_alive() for thread in keepers)


def test_a_script_with_nothing_to_do_says_so_in_one_line(tmp_path):
    """A Marin script whose steps are all built prints one line saying so (as the command line's no-op does)."""
    script = tmp_path / "script.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import pipelines as pl\n"
        "from marinbuild.executor import executor_main\n"
        "a = pl.step('noop/a')\n"
        "executor_main(steps=[a, pl.step('noop/b', inputs=[a])], args=['--prefix', sys.argv[1]])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    command = [sys.executable, str(script), str(tmp_path / "p")]
    subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    again = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    said = [line for line in (again.stdout + again.stderr).splitlines() if "Nothing to do" in line]
    assert len(said) == 1 and said[0].endswith("Nothing to do: all 2 step(s) are built"), again.stderr
