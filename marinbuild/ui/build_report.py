"""What ``marinbuild build`` shows: the listeners of its events, and the text printed from its result.

``BuildReport`` opens the summary; unless dry, the live progress and the event log; when asked, the
``--build_event_json_file`` writer and the ``--profile`` trace. A refused build ends its event log with the reason.
``--explain`` prints the plan, with why each step runs, before any step starts. ``print_result`` prints the local
backend's refusals (dry runs) and, after the dry plan and summary (or ``--output json``) on stdout, the changed code,
where to look and each failed step's page on stderr. The exit code stays with the command line."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from marinbuild.core.resources import hardware_of
from marinbuild.ui.bep import BuildEventJsonWriter
from marinbuild.ui.event_log import open_event_log
from marinbuild.ui.progress import ProgressDisplay
from marinbuild.ui.summary import BuildSummary
from marinbuild.ui.trace import ChromeTraceWriter
from marinbuild.ui.where import failure_pages, where_to_look

if TYPE_CHECKING:
    from marinbuild.analysis.build import EventLogPlace
    from marinbuild.analysis.session import Session
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.engine.build import BuildResult, PlanRow
    from marinbuild.run.events import Event, Listener
    from marinbuild.run.handoff import HandOff
    from marinbuild.ui.event_log import EventLog


class BuildReport:
    """The listeners of one build (summary, progress, event log, event file, trace) and its printed result."""

    def __init__(self, dry_run: bool, explain: bool, output: str, event_file: str | None, profile: str | None):
        self.dry_run, self.explain, self.output = dry_run, explain, output
        self.event_file, self.profile = event_file, profile
        self.summary: BuildSummary | None = None
        self.closers: list[Any] = []
        self.log: EventLog | None = None

    def open(self, event_log: EventLogPlace, session: Session) -> list[Listener]:
        self.summary = BuildSummary()
        listeners: list[Listener] = [self.summary]
        if not self.dry_run and self.explain and self.output == "text":
            listeners.append(_PlanPrinter(session))
        progress = None if self.dry_run else ProgressDisplay(console_file=sys.stderr)
        self.log = None if self.dry_run else open_event_log(*event_log)
        bep = BuildEventJsonWriter(self.event_file) if self.event_file else None
        trace = ChromeTraceWriter(self.profile) if self.profile else None
        self.closers = [c for c in (progress, self.log, bep, trace) if c is not None]
        return [*listeners, *self.closers]

    def refused(self, error: Exception) -> None:
        """End the event log with ``error`` if no step had started (after that, a crash is an interrupted build)."""
        if self.log is not None and (self.summary is None or not self.summary.started):
            self.log.refused(failure_text(error))

    def close(self) -> None:
        for closer in self.closers:
            closer.close()

    def print_result(self, result: BuildResult, session: Session) -> None:
        assert self.summary is not None, "the build opened no listeners"
        if result.dry_run_problems:
            click.echo(
                f"marinbuild: warning: the local backend could not run {len(result.dry_run_problems)} of the "
                f"steps below: {'; '.join(result.dry_run_problems)}",
                err=True,
            )
        self._note_outside_plan(result)
        if self.dry_run and self.output == "text" and result.plan is not None:
            print_plan(result.plan, session, self.explain)
        if self.output == "json":
            data = self.summary.as_dict()
            data["targets"] = [{"label": label, "output_path": path} for label, path in result.requested]
            data["dry_run"] = self.dry_run
            if result.plan is not None:
                data["plan"] = [
                    {
                        "step": row.step.name,
                        "state": row.state,
                        "output_path": row.output_path,
                        "from": [
                            {"checkpoint": h.path, "step": h.step, "of": h.producer.name}
                            for h in _hand_offs(session, row.step)
                        ],
                    }
                    for row in result.plan
                ]
            click.echo(json.dumps(data, indent=2))
        else:
            click.echo(self.summary.render(result.requested))
        if result.code_changed:
            click.echo(_code_changed_text(result, session), err=True)
        if not self.dry_run and result.succeeded:
            for line in where_to_look(result.engine, result.succeeded):
                click.echo(f"marinbuild: {line}", err=True)
        if result.failure is not None:
            for line in failure_pages(result.engine.prefix, self.summary.failures):
                click.echo(f"marinbuild: {line}", err=True)

    def _note_outside_plan(self, result: BuildResult) -> None:
        """Tell the summary the state of requested outputs ``--run_only`` left out of the plan."""
        if result.plan is None or self.summary is None:
            return
        planned = {row.output_path for row in result.plan}
        outside = [path for _label, path in result.requested if path not in planned]
        if not outside:
            return
        from marinbuild.cache.probe import BUILT, probe_outputs

        probes = probe_outputs(outside)
        self.summary.outside_plan(
            {
                path: "built" if probe.state == BUILT else "not built: not selected by --run_only"
                for path, probe in probes.items()
            }
        )


def failure_text(failure: Exception) -> str:
    """Why a build failed; a refusal to retry failed steps names the CLI's flag (the engine's names Marin's)."""
    from marinbuild.engine.errors import PreviousTaskFailedError

    if isinstance(failure, PreviousTaskFailedError):
        return (
            f"step(s) failed previously: {', '.join(failure.failed)}; nothing ran "
            "(--no-force_run_failed; rerun without it, or with --force_run_failed, to run them again)"
        )
    return str(failure)


def _code_changed_text(result: BuildResult, session: Session) -> str:
    """The warning about built outputs whose code changed: each step, its files, and how to look and rebuild
    (``why``/``--rebuild`` of its target, or ``--rebuild`` of a step no label names)."""
    named: dict[ExecutorStep, str] = {}
    if session.analysis is not None:
        for label in session.analysis.steps_of:
            for step in session.steps_of(label):
                named.setdefault(step, str(label))
    files = sorted({f for fs in result.code_changed.values() for f in fs})
    lines = [
        f"marinbuild: warning: code changed since {len(result.code_changed)} output(s) were built, not part of their "
        f"key, so they were not rebuilt: {', '.join(files)}"
    ]
    for step, files in result.code_changed.items():
        target = named.get(step)
        if target is not None:
            how = f"target {target}: marinbuild why {target}; rebuild: --rebuild {target}"
        else:
            how = f"a step inside a target, no label names it; rebuild: --rebuild {step.name}"
        lines.append(f"  {step.name}: {', '.join(files)} ({how})")
    return "\n".join(lines)


def print_plan(plan: list[PlanRow], session: Session, explain: bool) -> None:
    """A row per step of ``plan`` on stdout (state, name, path, lease, resources, checkpoints it starts from); with
    ``explain``, why each step to run does (print it before the run)."""
    for step, state, path, lease, will_run in plan:
        line = f"{state:<10} {step.name}  {path}"
        if lease is not None:
            line += f"  (lease {lease.worker_id}, {lease.age():.0f}s old)"
        click.echo(line)
        hardware = hardware_of(getattr(step, "resources", None))
        if hardware is not None:
            click.echo(f"           resources: {hardware}")
        for handoff in _hand_offs(session, step):
            click.echo(f"           from: {handoff}")
        if explain and will_run:
            from marinbuild.cache.why import explain_step

            click.echo(f"           why: {explain_step(session, step)}")


def _hand_offs(session: Session, step: ExecutorStep) -> list[HandOff]:
    from marinbuild.run.handoff import hand_offs

    return hand_offs(session.engine.table, step) if session.engine is not None else []


class _PlanPrinter:
    """``--explain`` of a build that runs: the plan and reasons at its first event, before a step changes them."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.printed = False

    def __call__(self, event: Event) -> None:
        from marinbuild.run import events as ev

        engine = self.session.engine
        if event.kind != ev.PLANNED or self.printed or engine is None or engine.plan is None:
            return
        self.printed = True
        from marinbuild.engine.build import PlanRow

        print_plan(
            [
                PlanRow(step, p.state, engine.output_paths[step], p.lease, p.will_run)
                for step, p in engine.plan.steps.items()
            ],
            self.session,
            True,
        )
