"""When the Ray backend bundles tiny steps, and how many (``marinbuild.run.ray_bundles``: pure, no Ray)."""

from __future__ import annotations

import pytest

from marinbuild.run.ray_bundles import MAX_BUNDLE, StepTimes, bundle_size, capacity, demands


def test_a_function_not_timed_yet_gets_a_task_per_step():
    assert bundle_size(1000, 2, None, 0.05) == 1


def test_the_budget_bounds_a_bundle_by_the_estimate():
    assert bundle_size(1000, 2, 0.01, 0.05) == 5
    assert bundle_size(1000, 2, 0.001, 0.05) == MAX_BUNDLE
    assert bundle_size(1000, 2, 0.2, 0.05) == 1  # longer than the budget: alone


def test_at_least_twice_the_tasks_the_cluster_runs_at_once_stay():
    assert bundle_size(40, 4, 0.001, 0.05) == 5  # 40 steps, 4 at once: 8 tasks of 5
    assert bundle_size(7, 4, 0.001, 0.05) == 1
    assert bundle_size(1000, 1000, 0.001, 0.05) == 1  # a big cluster: every step its own task


def test_no_bundles_when_off_or_when_the_cluster_lacks_what_the_steps_ask():
    assert bundle_size(1000, 2, 0.001, 0) == 1
    assert bundle_size(1000, None, 0.001, 0.05) == 1


def test_what_a_task_takes_from_a_node():
    assert demands({}) == {"CPU": 1.0}  # Ray's default for a task
    assert demands({"num_cpus": 0}) == {}
    assert demands(
        {"num_cpus": 2, "num_gpus": 1, "memory": 2**30, "resources": {"TPU": 4, "TPU-v4-8-head": 1}, "max_retries": 3}
    ) == {"CPU": 2.0, "GPU": 1.0, "memory": 2.0**30, "TPU": 4.0, "TPU-v4-8-head": 1.0}


def test_capacity_is_the_scarcest_resource():
    totals = {"CPU": 16.0, "GPU": 2.0, "memory": 64.0 * 2**30, "spot": 3.0}
    assert capacity({"CPU": 1.0}, totals) == 16
    assert capacity({"CPU": 2.0, "GPU": 1.0}, totals) == 2
    assert capacity({"CPU": 1.0, "spot": 1.0}, totals) == 3
    assert capacity({"CPU": 0.5}, totals) == 32
    assert capacity({}, totals) == 16  # a task that takes nothing: counted against the CPUs
    assert capacity({"CPU": 1.0, "TPU": 4.0}, totals) is None  # none yet (an autoscaler may add some)
    assert capacity({"CPU": 32.0}, totals) is None


def test_step_times_follow_short_steps_slowly_and_a_slow_one_at_once():
    times = StepTimes(budget=0.05)
    assert times.estimate is None
    times.add(0.004)
    assert times.estimate == pytest.approx(0.004)
    times.add(0.002)
    assert times.estimate == pytest.approx(0.0035)
    times.add(0.5)  # longer than the budget: the estimate is that step's time
    assert times.estimate == pytest.approx(0.5)
    assert bundle_size(1000, 2, times.estimate, 0.05) == 1


def test_steps_are_timed_by_kind_and_a_build_targets_kind_is_its_rule():
    from types import SimpleNamespace

    from marinbuild.analysis.analyze import TargetConfig, run_target
    from marinbuild.run.step_call import StepCall

    target = TargetConfig(
        label="//p:a", rule="tokenize", rule_key="rules/tokenize.py:tokenize", workspace="/ws", attrs={}
    )
    assert StepCall(run_target, target).kind == "rules/tokenize.py:tokenize"
    assert StepCall(print, {"x": 1}).kind is None  # the function alone
    assert StepCall(print, SimpleNamespace(step_kind=["a"])).kind == "['a']"  # unhashable: its repr
