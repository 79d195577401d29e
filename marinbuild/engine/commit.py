"""The records the engine writes around the steps, as Marin's ``write_infos`` would: the run info JSON
(``store/run_info.py``) and the ``.executor_info`` of steps the run does not run (a step that runs writes its
own when it starts: ``run/step_job.py``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from marinbuild.engine.infos import ExecutorInfo, step_info_text
from marinbuild.run.plan import BUILT
from marinbuild.store import fs, records, run_info

if TYPE_CHECKING:
    from marinbuild.core.graph import StepGraph
    from marinbuild.core.versions import VersionTable
    from marinbuild.run.plan import Plan


def run_info_path(info: ExecutorInfo, base: str) -> str:
    """Where the run info of ``info`` goes under ``base`` (``store.run_info.name``; writes nothing)."""
    script = run_info.script_name(info.caller_path)
    return fs.join(base, run_info.name(script, (step.output_path for step in info.steps), info.prefix))


def write_run_info(table: VersionTable, info: ExecutorInfo, base: str) -> str:
    """Write (or replace) the run info JSON of ``info`` under ``base``; return its path."""
    path = run_info_path(info, base)
    head = {key: getattr(info, key) for key in run_info.HEAD_KEYS}
    strs = table.version_strs
    lines = (run_info.step_line(entry, strs[step]) for entry, step in zip(info.steps, table.steps, strict=True))
    run_info.write(path, head, lines)
    return path


def write_step_infos(table: VersionTable) -> None:
    """Every versioned step's ``.executor_info``, replacing what is there (Marin's ``write_infos``)."""
    for step in table.steps:
        records.write_info(table.output_paths[step], step_info_text(table, step))


def write_infos_not_run(table: VersionTable, graph: StepGraph, plan: Plan, selected: bool) -> None:
    """Before any step starts, the missing ``.executor_info`` of steps not run that Marin records too
    (pseudo-dependencies, steps ``run_only`` leaves out); below a built step nothing is looked at: a no-op writes
    nothing."""
    if len(plan.steps) == len(table.steps):
        return
    if not selected:  # without run_only, a step the plan did not reach is below a built one or a pseudo-dependency
        left_out = [s for s in table.steps if table.is_pseudo_dep[s] and s not in plan.steps]
    else:
        built = [s for s, p in plan.steps.items() if p.state == BUILT]
        below_built = set(graph.blocking_closure(d for s in built for d in graph.blocking_deps(s)))
        left_out = [s for s in table.steps if s not in plan.steps and s not in below_built]
    if left_out:
        records.write_missing_infos(
            {table.output_paths[s]: functools.partial(step_info_text, table, s) for s in left_out}
        )
