"""What ``marinbuild build`` shows: the listeners of its events, and the text printed from its result.

``BuildReport`` is the ``BuildListeners`` a build's flow (``marinbuild.analysis.build``) opens: the
summary always; the live progress display and the workspace's event log unless it is a dry run;
the ``--build_event_json_file`` writer and the ``--profile`` trace when asked for. After the
build, ``print_result`` prints, in this order: on stderr the steps the local backend could not run
(dry runs), on stdout the plan (dry runs and ``--explain``: a row per step, its resources and, with
``--explain``, why it runs) and the summary (or the ``--output json`` result), then on stderr the
outputs whose code changed, where to look (experiment page, W&B, TensorBoard) and the web view's
page of each failed step. What the command's exit code is, and the lines that go with it, stay
with the command line.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import click

from marinbuild.cache.why import explain_step
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
    from marinbuild.engine.build import BuildResult
    from marinbuild.run.events import Listener

__all__ = ["BuildReport"]


class BuildReport:
    """The listeners of one build (summary, progress, event log, event file, trace) and its printed result."""

    def __init__(self, dry_run: bool, explain: bool, output: str, event_file: str | None, profile: str | None):
        self.dry_run, self.explain, self.output = dry_run, explain, output
        self.event_file, self.profile = event_file, profile
        self.summary: BuildSummary | None = None
        self.closers: list[Any] = []

    def open(self, event_log: EventLogPlace) -> list[Listener]:
        self.summary = BuildSummary()
        listeners: list[Listener] = [self.summary]
        if not self.dry_run:
            progress = ProgressDisplay(console_file=sys.stderr)
            listeners.append(progress)
            self.closers.append(progress)

            log = open_event_log(*event_log)
            if log is not None:
                listeners.append(log)
                self.closers.append(log)
        if self.event_file:
            bep = BuildEventJsonWriter(self.event_file)
            listeners.append(bep)
            self.closers.append(bep)
        if self.profile:
            trace = ChromeTraceWriter(self.profile)
            listeners.append(trace)
            self.closers.append(trace)
        return listeners

    def close(self) -> None:
        for closer in self.closers:
            closer.close()

    def print_result(self, result: BuildResult, session: Session) -> None:
        """Print what the build of ``session``'s targets did (the order is the module docstring's)."""
        if result.dry_run_problems:
            click.echo(
                f"marinbuild: warning: the local backend could not run {len(result.dry_run_problems)} of the "
                f"steps below: {'; '.join(result.dry_run_problems)}",
                err=True,
            )
        self._print_plan_and_summary(result, session)
        if result.code_changed:
            files = sorted({f for fs in result.code_changed.values() for f in fs})
            click.echo(
                f"marinbuild: warning: code changed since {len(result.code_changed)} output(s) were built, not part "
                f"of their key, so they were not rebuilt: {', '.join(files)} (marinbuild why TARGET says which; "
                "--rebuild TARGET rebuilds one)",
                err=True,
            )
        if not self.dry_run and result.succeeded:
            for line in where_to_look(result.engine, result.succeeded):
                click.echo(f"marinbuild: {line}", err=True)
        if result.failure is not None and self.summary is not None:
            for line in failure_pages(result.engine.prefix, self.summary.failures):
                click.echo(f"marinbuild: {line}", err=True)

    def _print_plan_and_summary(self, result: BuildResult, session: Session) -> None:
        """The plan (dry runs, ``--explain``), then the summary or the JSON result, on stdout."""
        assert self.summary is not None, "the build opened no listeners"
        if (self.dry_run or self.explain) and self.output == "text" and result.plan is not None:
            for step, state, path, lease, will_run in result.plan:
                line = f"{state:<10} {step.name}  {path}"
                if lease is not None:
                    line += f"  (lease {lease.worker_id}, {lease.age():.0f}s old)"
                click.echo(line)
                hardware = _hardware(step)
                if hardware is not None:
                    click.echo(f"           resources: {hardware}")
                if self.explain and will_run:
                    click.echo(f"           why: {explain_step(session, step)}")
        if self.output == "json":
            data = self.summary.as_dict()
            data["targets"] = [{"label": label, "output_path": path} for label, path in result.requested]
            data["dry_run"] = self.dry_run
            if result.plan is not None:
                data["plan"] = [
                    {"step": row.step.name, "state": row.state, "output_path": row.output_path} for row in result.plan
                ]
            click.echo(json.dumps(data, indent=2))
        else:
            click.echo(self.summary.render(result.requested))


def _hardware(step: Any) -> str | None:
    """The TPU slice (type, slices, hosts, chips) or GPUs a step asks for, as ``-n`` shows it."""
    resources = getattr(step, "resources", None)
    if resources is None:
        return None

    return hardware_of(resources)
