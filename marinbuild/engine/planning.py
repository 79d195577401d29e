"""From versioned steps to the run's plan: the targets (the requested steps or the ``run_only`` selection, plus
the ``rebuild`` steps), each needed step's state (``run/plan.py``), and what refuses the run. Nothing here writes."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from marinbuild.core.graph import StepGraph
from marinbuild.engine.errors import PreviousTaskFailedError
from marinbuild.run import plan as planning
from marinbuild.store.other_versions import with_other_versions
from marinbuild.store.traceback_file import existing_traceback

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.core.versions import VersionTable

logger = logging.getLogger("marinbuild")


def plan_run(
    table: VersionTable,
    requested: Iterable[ExecutorStep],
    *,
    run_only: list[str] | None,
    rebuild: Iterable[ExecutorStep],
    worker_id: str,
    stale_after: float,
) -> tuple[StepGraph, planning.Plan]:
    """The graph of ``table`` and the plan of the run's targets (every step here is versioned in ``table``)."""
    graph = StepGraph(table)
    if run_only is not None:
        targets, unused = graph.select(run_only)
        if unused:
            logger.warning("run_only patterns matched no step: %s", ", ".join(unused))
    else:
        targets = [table.canonicalize(s) for s in requested]
    rebuild = list(rebuild)
    targets = list(dict.fromkeys([*targets, *(table.canonicalize(s) for s in rebuild)]))
    return graph, planning.make_plan(graph, targets, worker_id=worker_id, stale_after=stale_after, rebuild=rebuild)


def mark_stale(plan: planning.Plan, prefix: str, output_paths: dict[ExecutorStep, str]) -> None:
    """A missing step with another version under ``prefix`` becomes ``STALE`` (dry runs, cache status, query)."""
    missing = plan.by_state(planning.MISSING)
    if not missing:
        return
    stale = with_other_versions(prefix, {s.name: output_paths[s] for s in missing})
    for step in missing:
        if step.name in stale:
            plan.steps[step].state = planning.STALE


def refuse_failed_before(plan: planning.Plan, output_paths: dict[ExecutorStep, str]) -> None:
    """Marin's ``PreviousTaskFailedError`` naming each needed step that failed before (and its traceback file)."""
    failed_before = plan.by_state(planning.FAILED)
    if not failed_before:
        return

    def named(s: ExecutorStep) -> str:
        traceback = existing_traceback(output_paths[s])
        return f"{s.name} ({plan.steps[s].status}" + (f"; traceback: {traceback})" if traceback else ")")

    failed = [named(s) for s in failed_before]
    raise PreviousTaskFailedError(
        f"step(s) failed previously: {', '.join(failed)}; rerun with force_run_failed=True", failed
    )
