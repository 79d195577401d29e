"""The plan: which requested steps are built, which must run, and why.

Statuses are read level by level downward from the requested steps, stopping at a built step, so a no-op reads one
status per requested step. Each level is one batched read (``store.batch``); on a remote store, once a level has steps
to run, all below is read in one more batch. A built step whose path holds another version's action record raises
``ActionCacheCollisionError``. A step that will run also needs the producers of checkpoints it starts from that are not
there yet (``run/handoff.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from marinbuild.core.graph import StepGraph
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.run.handoff import needs
from marinbuild.store import batch
from marinbuild.store import status as st
from marinbuild.store.action_cache import ActionKey, check_built
from marinbuild.store.lease import LeaseRecord
from marinbuild.store.lease_factory import lease_for


class StepState(StrEnum):
    """A needed step's state; a ``StrEnum`` whose value events, ``--output json`` and build-event files carry."""

    BUILT = "built"
    MISSING = "missing"  # never built, or its output was removed
    STALE = "stale"  # not built at this version, but another version of the step is under the prefix (dry runs say so)
    FAILED = "failed"  # failed (or dependency-failed) before
    RUNNING = "running"  # another runner holds a live lease
    ABANDONED = "abandoned"  # status RUNNING but the lease is stale or gone: its runner died
    REBUILD = "rebuild"  # built, but asked to run again (``--rebuild``)


# The states under the names the planner's users import.
BUILT = StepState.BUILT
MISSING = StepState.MISSING
STALE = StepState.STALE
FAILED = StepState.FAILED
RUNNING = StepState.RUNNING
ABANDONED = StepState.ABANDONED
REBUILD = StepState.REBUILD


@dataclass
class StepPlan:
    step: ExecutorStep
    state: StepState
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

    def by_state(self, state: StepState) -> list[ExecutorStep]:
        return [s for s, p in self.steps.items() if p.state == state]


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def make_plan(
    graph: StepGraph,
    targets: Iterable[ExecutorStep],
    *,
    worker_id: str,
    stale_after: float,
    rebuild: Iterable[ExecutorStep] = (),
) -> Plan:
    """Each needed step's state; ``rebuild``: steps planned to run again even when built (``REBUILD``)."""
    table = graph.table
    again = {table.canonicalize(s) for s in rebuild}
    plan = Plan()
    frontier = list(dict.fromkeys(table.canonicalize(t) for t in targets))
    seen = set(frontier)
    statuses: dict[str, str | None] = {}
    actions: dict[str, frozenset[str]] = {}

    def read(paths: list[str]) -> None:  # local files directly, remote ones batched (listings on GCS)
        got = batch.read_statuses(paths)
        statuses.update(got)
        actions.update(got.actions)

    while frontier:
        read([p for p in (table.output_paths[s] for s in frontier) if p not in statuses])
        next_frontier = []
        built = []
        for step in frontier:
            output_path = table.output_paths[step]
            status = statuses[output_path]
            plan.steps[step] = _step_plan(step, status, output_path, worker_id, stale_after)
            if step in again and status == st.STATUS_SUCCESS:
                plan.steps[step] = StepPlan(step, REBUILD, status)
            elif status == st.STATUS_SUCCESS:
                built.append(
                    (
                        output_path,
                        ActionKey(table.action_digest(step), step.name, step.override_output_path is not None),
                    )
                )
                continue
            for dep in needs(table, step):
                if dep not in seen:
                    seen.add(dep)
                    next_frontier.append(dep)
        check_built(built, actions)
        if next_frontier and _is_remote(table.output_paths[next_frontier[0]]):
            # One batch for everything below, instead of a round trip per level of the graph.
            below = [table.output_paths[s] for s in graph.blocking_closure(next_frontier)]
            read([p for p in dict.fromkeys(below) if p not in statuses])
        frontier = next_frontier
    plan.to_run = [s for s in table.steps if s in plan.steps and plan.steps[s].will_run]
    return plan


def _step_plan(step: ExecutorStep, status: str | None, output_path: str, worker_id: str, stale: float) -> StepPlan:
    if status == st.STATUS_SUCCESS:
        return StepPlan(step, BUILT, status)
    if status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED):
        return StepPlan(step, FAILED, status)
    if status == st.STATUS_RUNNING:
        try:
            record = lease_for(output_path, worker_id, stale).holder()
        except st.DamagedFileError:
            record = None  # an unparsable lease: taken over once it is stale (``LocalFileLease.try_acquire``)
        if record is not None and not record.is_over(stale):
            return StepPlan(step, RUNNING, status, record)
        return StepPlan(step, ABANDONED, status, record)
    return StepPlan(step, MISSING, status)
