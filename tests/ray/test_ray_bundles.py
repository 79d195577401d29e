"""Bundles on a real Ray cluster: tiny steps of one function share tasks, and each is still its own step.

The steps ask for a ``one_at_a_time`` resource that one node of the cluster has once, so the cluster runs one
of their tasks at a time and ``ray_bundles`` bundles a fan-out of them once the root's task has said
how long a step takes (see ``ray_steps.fan_out``).
"""

from __future__ import annotations

import json
import os
import traceback
from collections import Counter
from pathlib import Path

import pytest
import ray_steps as rs

from marinbuild.executor import Executor, StepFailedError
from marinbuild.run.ray_backend import RayBackend, RemoteTraceback, StepLostError
from marinbuild.store import action_cache
from marinbuild.store import status as st

pytestmark = pytest.mark.timeout(240)

ONE_AT_A_TIME = {"one_at_a_time": 1}


@pytest.fixture(scope="module")
def bundle_node(ray_cluster):
    node = ray_cluster.add_node(ONE_AT_A_TIME, num_cpus=1)
    yield node
    ray_cluster.kill_node(node)


def build(prefix: str, steps: list, backend: RayBackend, keep_going: bool = False) -> Executor:
    executor = Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        listeners=[],
        backend=backend,
        keep_going=keep_going,
    )
    try:
        executor.run(steps)
    finally:
        backend.shutdown()
    return executor


def task_of(executor: Executor, step) -> str:
    from marinbuild.store import fs

    return json.loads(fs.read_bytes(fs.join(executor.output_paths[step], "task.json")))["task_id"]


def attempts(log_dir: Path) -> Counter:
    """Calls of each step's function (by tag), every attempt counted."""
    return Counter(name.rsplit("-", 1)[0] for name in os.listdir(log_dir))


def test_tiny_steps_share_tasks_and_each_commits_on_its_own(ray_cluster, bundle_node, prefix, tmp_path):
    steps = rs.fan_out("tiny", str(tmp_path / "log"), {}, 12, ONE_AT_A_TIME)
    backend = RayBackend(ray_cluster.address, bundle_seconds=1.0)
    executor = build(prefix, steps, backend)
    assert set(executor.outcome.ran) == set(steps)
    tasks = Counter(task_of(executor, s) for s in steps)
    assert backend.tasks_launched == len(tasks) < len(steps)  # some tasks ran several steps
    assert max(tasks.values()) > 1
    for step in steps:
        out = executor.output_paths[step]
        assert st.read_status(out) == "SUCCESS"
        assert json.loads(Path(out, ".artifact.json").read_text())["tag"] == step.config.tag.value
        record = action_cache.read_record(out, action_cache.version_digest(executor.version_strs[step]))
        assert record is not None and record.name == step.name and record.manifest is not None
        assert not Path(out, ".executor_status.lock").exists()
    assert attempts(tmp_path / "log") == Counter({s.config.tag.value: 1 for s in steps})


def test_steps_of_two_kinds_never_share_a_task(ray_cluster, bundle_node, prefix, tmp_path):
    """One function, two kinds of step (``step_kind``, as a BUILD target's rule): each kind is timed and
    bundled on its own, however the two are interleaved."""
    steps = rs.fan_out("kinds", str(tmp_path / "log"), {}, 16, ONE_AT_A_TIME, kinds=("a", "b"))
    backend = RayBackend(ray_cluster.address, bundle_seconds=1.0)
    executor = build(prefix, steps, backend)
    kinds_in: dict[str, set] = {}
    for step in steps:
        kinds_in.setdefault(task_of(executor, step), set()).add(step.config.step_kind)
    assert all(len(kinds) == 1 for kinds in kinds_in.values())
    assert len(kinds_in) < len(steps)  # yet steps of one kind shared tasks


def test_one_task_per_step_when_bundling_is_off(ray_cluster, bundle_node, prefix, tmp_path):
    steps = rs.fan_out("off", str(tmp_path / "log"), {}, 6, ONE_AT_A_TIME)
    backend = RayBackend(ray_cluster.address, bundle_seconds=0)
    executor = build(prefix, steps, backend)
    assert backend.tasks_launched == len({task_of(executor, s) for s in steps}) == len(steps)


def test_a_bundle_starts_no_step_after_its_budget_and_hands_the_rest_back(ray_cluster, bundle_node, prefix, tmp_path):
    steps = rs.fan_out("budget", str(tmp_path / "log"), {i: "sleep:0.1" for i in range(12)}, 12, ONE_AT_A_TIME)
    backend = RayBackend(ray_cluster.address, bundle_seconds=0.25)
    executor = build(prefix, steps, backend)
    assert all(st.read_status(executor.output_paths[s]) == "SUCCESS" for s in steps)
    per_task = Counter(task_of(executor, s) for s in steps[1:])
    assert max(per_task.values()) <= 3  # a step starts only before 0.25 s have passed: at most 3 of 0.1 s
    assert len(per_task) < 12  # yet some ran together
    assert attempts(tmp_path / "log") == Counter({s.config.tag.value: 1 for s in steps})  # handed back, not rerun


def test_a_step_that_raises_in_a_bundle_is_that_steps_failure_with_its_traceback(
    ray_cluster, bundle_node, prefix, tmp_path
):
    steps = rs.fan_out("raises", str(tmp_path / "log"), {2: "raise"}, 8, ONE_AT_A_TIME)
    bad = steps[3]  # c2
    backend = RayBackend(ray_cluster.address, bundle_seconds=1.0)
    with pytest.raises(StepFailedError) as info:
        build(prefix, steps, backend, keep_going=True)
    assert list(info.value.failures) == ["raises/c2"]
    original = info.value.__cause__
    assert isinstance(original, ValueError) and str(original) == "boom c2"
    remote = original.__cause__
    assert isinstance(remote, RemoteTraceback)
    assert "in_task" in remote.text and "ray_steps.py" in remote.text and "boom c2" in remote.text
    assert "in_task" in "".join(traceback.format_exception(info.value))
    assert backend.tasks_launched < len(steps)
    outputs = {s: Path(prefix).glob(f"{s.name}-*") for s in steps}
    paths = {s: next(iter(p)) for s, p in outputs.items()}
    assert st.read_status(str(paths[bad])) == "FAILED"
    assert all(st.read_status(str(paths[s])) == "SUCCESS" for s in steps if s is not bad)
    kept = (paths[bad] / ".marinbuild_traceback.txt").read_text()  # the driver kept the bundle's traceback of it
    assert "in in_task" in kept and "ValueError: boom c2" in kept and "\nRay worker log: " in kept
    assert "Ray worker log: " in str(info.value.failures["raises/c2"].__cause__.__notes__)
    assert not any((paths[s] / ".marinbuild_traceback.txt").exists() for s in steps if s is not bad)
    assert attempts(tmp_path / "log")["c2"] == 1  # the step's own error is not retried


def test_a_bundle_whose_worker_died_is_retried_and_each_step_runs_once(ray_cluster, bundle_node, prefix, tmp_path):
    steps = rs.fan_out("dies", str(tmp_path / "log"), {2: "die-once"}, 12, ONE_AT_A_TIME)
    backend = RayBackend(ray_cluster.address, bundle_seconds=1.0, max_retries=2)
    executor = build(prefix, steps, backend)
    assert all(st.read_status(executor.output_paths[s]) == "SUCCESS" for s in steps)
    dying = steps[3]  # c2, third in the first bundle (c0-c5)
    assert task_of(executor, dying) == task_of(executor, steps[1])  # the retried bundle: the same task
    counts = attempts(tmp_path / "log")
    assert counts["c2"] == 2  # died once, then ran
    assert all(counts[s.config.tag.value] == 1 for s in steps if s is not dying)  # committed ones skipped


def test_a_lost_bundle_counts_its_committed_steps_and_runs_the_others_alone(ray_cluster, bundle_node, prefix, tmp_path):
    steps = rs.fan_out("lost", str(tmp_path / "log"), {2: "die"}, 12, ONE_AT_A_TIME)
    dying = steps[3]
    backend = RayBackend(ray_cluster.address, bundle_seconds=1.0, max_retries=0)
    with pytest.raises(StepFailedError) as info:
        build(prefix, steps, backend, keep_going=True)
    assert list(info.value.failures) == ["lost/c2"]
    assert isinstance(info.value.failures["lost/c2"].__cause__, StepLostError)
    paths = {s: str(next(Path(prefix).glob(f"{s.name}-*"))) for s in steps}
    assert st.read_status(paths[dying]) == "FAILED"
    assert all(st.read_status(paths[s]) == "SUCCESS" for s in steps if s is not dying)
    counts = attempts(tmp_path / "log")
    assert counts["c2"] == 2  # in its bundle, then alone
    assert all(counts[s.config.tag.value] == 1 for s in steps if s is not dying)  # none rerun, none left out
    first = json.loads(Path(paths[steps[1]], "task.json").read_text())["task_id"]  # c0, before c2 in its bundle
    assert (tmp_path / "log" / "c2-0").read_text() == first  # c2 died in c0's task
    assert (tmp_path / "log" / "c2-1").read_text() != first  # then in a task of its own
    after = [json.loads(Path(paths[s], "task.json").read_text())["task_id"] for s in steps[4:7]]  # c3-c5
    assert first not in after and len(set(after)) == 3  # launched again, each in a task of its own


def test_a_fan_out_on_a_gs_prefix_with_bundling_on(ray_cluster, bundle_node, gs_prefix, gcs_env, tmp_path):
    """On GCS each lease is taken on a lease thread and comes back to the loop on its own, and a bundle forms
    only of steps whose leases came back together (in this run, usually none): either way each step ran once
    and committed on its own."""
    from marinbuild.executor import remote
    from marinbuild.store import records

    steps = rs.fan_out("gs", str(tmp_path / "log"), {}, 16, ONE_AT_A_TIME, fn=remote(rs.in_task, env_vars=gcs_env))
    backend = RayBackend(ray_cluster.address, bundle_seconds=1.0)
    executor = build(gs_prefix, steps, backend)
    assert set(executor.outcome.ran) == set(steps)
    for step in steps:
        out = executor.output_paths[step]
        assert out.startswith("gs://") and st.read_status(out) == "SUCCESS"
        assert records.read_artifact(out)["tag"] == step.config.tag.value
    assert backend.tasks_launched == len({task_of(executor, s) for s in steps}) <= len(steps)
    assert attempts(tmp_path / "log") == Counter({s.config.tag.value: 1 for s in steps})
