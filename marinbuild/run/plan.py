"""The plan: which requested steps are built, which must run, and why.

Planning reads statuses level by level from the requested steps downward and stops
descending at a built step (its dependencies are not needed), so a no-op build reads one
status per requested step. Each level is one batched read (``read_statuses``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from marinbuild.core.graph import StepGraph
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, lease_for

# Step states, as the plan, dry runs and `why` name them.
BUILT = "built"
MISSING = "missing"  # never built, or its output was removed
FAILED = "failed"  # failed (or dependency-failed) before
RUNNING = "running"  # another runner holds a live lease
ABANDONED = "abandoned"  # status RUNNING but the lease is stale or gone: its runner died


@dataclass
class StepPlan:
    step: ExecutorStep
    state: str
    status: str | None
    lease: LeaseRecord | None = None

    @property
    def will_run(self) -> bool:
        return self.state != BUILT


@dataclass
class Plan:
    """Per needed step, its state; ``to_run`` in dependency order."""

    steps: dict[ExecutorStep, StepPlan] = field(default_factory=dict)
    to_run: list[ExecutorStep] = field(default_factory=list)

    def by_state(self, state: str) -> list[ExecutorStep]:
        return [s for s, p in self.steps.items() if p.state == state]


def read_statuses(output_paths: list[str], workers: int = 16) -> dict[str, str | None]:
    """Statuses of many steps; remote prefixes are read concurrently."""
    if len(output_paths) < 32 or all("://" not in p for p in output_paths):
        return {p: st.read_status(p) for p in output_paths}
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(output_paths, pool.map(st.read_status, output_paths), strict=True))


def make_plan(
    graph: StepGraph,
    targets: Iterable[ExecutorStep],
    *,
    worker_id: str,
    stale_after: float,
    status_reader: Callable[[list[str]], dict[str, str | None]] = read_statuses,
) -> Plan:
    table = graph.table
    plan = Plan()
    frontier = list(dict.fromkeys(table.canonicalize(t) for t in targets))
    seen = set(frontier)
    while frontier:
        statuses = status_reader([table.output_paths[s] for s in frontier])
        next_frontier = []
        for step in frontier:
            status = statuses[table.output_paths[step]]
            plan.steps[step] = _step_plan(step, status, table.output_paths[step], worker_id, stale_after)
            if status == st.STATUS_SUCCESS:
                continue
            for dep in graph.blocking_deps(step):
                if dep not in seen:
                    seen.add(dep)
                    next_frontier.append(dep)
        frontier = next_frontier
    plan.to_run = [s for s in table.steps if s in plan.steps and plan.steps[s].will_run]
    return plan


def _step_plan(step: ExecutorStep, status: str | None, output_path: str, worker_id: str, stale: float) -> StepPlan:
    if status == st.STATUS_SUCCESS:
        return StepPlan(step, BUILT, status)
    if status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED):
        return StepPlan(step, FAILED, status)
    if status == st.STATUS_RUNNING:
        record = lease_for(output_path, worker_id, stale).holder()
        if record is not None and not record.is_stale(stale):
            return StepPlan(step, RUNNING, status, record)
        return StepPlan(step, ABANDONED, status, record)
    return StepPlan(step, MISSING, status)
