"""The records the engine writes around the steps: the run info, and ``.executor_info`` of steps not run.

A step the run runs writes its own ``.executor_info`` when it starts (``run/step_job.py``, with the text of
``infos.step_info_text``); this module writes the rest, as Marin's ``write_infos`` would:

- ``write_infos_not_run``: before any step starts, the ``.executor_info`` of the steps the run will not run
  and Marin would still have recorded (pseudo-dependencies nothing blocking needs, steps ``run_only`` leaves
  out), when their folder has none;
- ``write_run_info``/``run_info_path``: the run info JSON (``store/run_info.py``), or only its path (the
  engine writes it on a thread of its own while the steps run: its size follows the whole graph and no step
  needs it);
- ``write_step_infos``: every versioned step's ``.executor_info`` (Marin's ``write_infos``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from marinbuild.engine.infos import ExecutorInfo, step_info_text

if TYPE_CHECKING:
    from marinbuild.core.graph import StepGraph
    from marinbuild.core.versions import VersionTable
    from marinbuild.run.plan import Plan
    from marinbuild.store.run_info import Pieces


def _run_info_steps(table: VersionTable, info: ExecutorInfo) -> Iterator[Pieces]:
    """Each step's entry of the run info (``store.run_info.step_pieces``), made as it is consumed."""
    from marinbuild.store import run_info

    pieces = table.version_pieces
    for entry, step in zip(info.steps, table.steps, strict=True):
        yield run_info.step_pieces(entry, pieces[step])


def run_info_path(table: VersionTable, info: ExecutorInfo, base: str) -> str:
    """Where the run info of ``info`` goes under ``base`` (hashes every step's entry; writes nothing)."""
    from marinbuild.store import fs, run_info

    script = run_info.script_name(info.caller_path)
    return fs.join(base, run_info.name(script, _run_info_steps(table, info)))


def write_run_info(
    table: VersionTable,
    info: ExecutorInfo,
    base: str,
    *,
    only_if_new: bool,
    spans: list[tuple[int, int]] | None = None,
    states: list[tuple[int, bytes]] | None = None,
) -> str:
    """Write the run info JSON (Marin's content, one step per line, streamed in one pass, replaced atomically);
    return its path. ``only_if_new``: keep a file of the same name (the same graph, an earlier run). ``spans``
    gets each entry's (offset, length) in a file written, ``states`` the md5 states a later splice resumes from
    (``store.run_info.write``)."""
    from marinbuild.store import run_info

    head = {key: getattr(info, key) for key in run_info.HEAD_KEYS}
    script = run_info.script_name(info.caller_path)
    return run_info.write(base, script, head, _run_info_steps(table, info), only_if_new, spans, states)


def existing_run_info(
    table: VersionTable, base: str, worker_id: str, prefix: str
) -> tuple[str, list[tuple[int, int]], list[tuple[int, bytes]]] | None:
    """The local run info an earlier run of exactly the table's steps wrote under ``base``, with each entry's (offset,
    length) in it and the md5 states a splice resumes from (``store.run_info.find_local``); None if there is none.
    Composes and hashes every entry."""
    from marinbuild.engine.infos import run_info as records
    from marinbuild.store import fs, run_info

    if not fs.is_local(base):
        return None
    _steps, info = records(table, worker_id=worker_id, prefix=prefix, description=None)
    script = run_info.script_name(info.caller_path)
    return run_info.find_local(fs.local_path(base), script, _run_info_steps(table, info))


def write_step_infos(table: VersionTable) -> None:
    """Every versioned step's ``.executor_info``, replacing what is there (Marin's ``write_infos``)."""
    from marinbuild.store import records

    for step in table.steps:
        records.write_info(table.output_paths[step], step_info_text(table, step))


def write_infos_not_run(table: VersionTable, graph: StepGraph, plan: Plan, selected: bool) -> None:
    """Marin writes every step's ``.executor_info`` before it starts any (``write_infos``), also for the steps it
    will not run: pseudo-dependencies nothing blocking needs, and steps ``run_only`` leaves out. Those get theirs
    here, before any step starts, when their folder has none (Marin's own step runner also writes only a missing
    one); the steps this run runs write theirs when they start. Steps below a built step are not looked at:
    whoever built them wrote theirs, so a no-op run without pseudo-dependencies checks and writes nothing.
    ``selected``: the run was narrowed by ``run_only``."""
    from marinbuild.run.plan import BUILT
    from marinbuild.store import records

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
