"""When the Ray backend sends several steps of one function in one Ray task, and how many. Pure: no Ray, no I/O.

Ray's own cost per task (driver, raylet and worker together) is more than a step of a millisecond
costs. So once the steps of a function are known to be short, and more of them wait than the cluster
can run at once, the driver puts several in one task (a *bundle*). The task runs them one after the
other, each exactly as a task of one step runs it (RUNNING, the step, its own commit and outcome),
and starts no more once its time budget is spent: it hands the rest back, and the driver launches
them again.

Kept under the complexity rule on ``bench/ray_bench.py``'s rows "Ray backend (whole run)" against "one
task per step" (docs/performance.md).

The rules:
- Steps are timed, and bundled, by function and kind (``StepCall.kind``: a config's ``step_kind``,
  a BUILD target's rule); the first steps of a kind go one per task: bundling waits until one has
  ended and said how long it took in its task (``StepTimes``).
- A bundle holds at most ``budget / estimate`` steps, so it lasts about ``budget`` seconds (0.05 s
  by default), and at most ``MAX_BUNDLE``.
- A bundle holds at most ``waiting // (2 * capacity)`` steps, where ``capacity`` is how many tasks of
  that resource shape the cluster can run at once: at least twice as many tasks as can run stay, so
  bundling never leaves a slot idle that separate tasks would have filled.
- No bundling for a shape whose capacity is unknown (a resource the cluster does not have yet: an
  autoscaler may add it), nor for steps that need a fresh worker process each (TPU steps).
- A step that took longer than ``budget`` sets the estimate to its own time, so one slow step stops
  the bundling of its function at once; shorter ones move it a quarter of the way.
- The driver bundles steps whose leases it holds at the same time: on an object store each lease is
  taken on a lease thread and comes back alone, so bundles seldom form there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

MAX_BUNDLE = 32
"""Steps in one task, at most."""
DEFAULT_BUNDLE_SECONDS = 0.05
"""A bundle starts no step once this long has passed since it began; and it is sized to last about this long."""
_WEIGHT = 0.25
"""How far one step's time moves its function's estimate (unless the step took longer than the budget)."""


class StepTimes:
    """The recent seconds one step of a function takes in its task (None until one has ended)."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.estimate: float | None = None

    def add(self, seconds: float) -> None:
        if self.estimate is None or seconds >= self.budget:
            self.estimate = seconds
        else:
            self.estimate += _WEIGHT * (seconds - self.estimate)


def demands(options: Mapping[str, Any]) -> dict[str, float]:
    """What one task with these Ray options takes from a node, by Ray resource name (a task's CPU is 1 unless set)."""
    out: dict[str, float] = {"CPU": float(options.get("num_cpus", 1) or 0)}
    if options.get("num_gpus"):
        out["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        out["memory"] = float(options["memory"])
    for name, amount in (options.get("resources") or {}).items():
        out[name] = float(amount)
    return {name: amount for name, amount in out.items() if amount > 0}


def capacity(demand: Mapping[str, float], totals: Mapping[str, float]) -> int | None:
    """Tasks taking ``demand`` each that a cluster with ``totals`` runs at once (None: it has none of something).

    A task that takes nothing is counted against the cluster's CPUs, as Ray's worker pool is.
    """
    if not demand:
        cpus = totals.get("CPU", 0)
        return int(cpus) if cpus >= 1 else None
    fits = min(math.floor(totals.get(name, 0) / amount + 1e-9) for name, amount in demand.items())
    return fits if fits >= 1 else None


def bundle_size(
    waiting: int, tasks_at_once: int | None, estimate: float | None, budget: float, limit: int = MAX_BUNDLE
) -> int:
    """Steps to put in the next task of a function (1: a task of its own), given ``waiting`` steps of it."""
    if budget <= 0 or estimate is None or not tasks_at_once:
        return 1
    by_time = int(budget / max(estimate, 1e-6))
    by_backlog = waiting // (2 * tasks_at_once)
    return max(1, min(limit, by_time, by_backlog))
