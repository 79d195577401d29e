"""One ``marinbuild build``: from the patterns and settings of a command line to a ``BuildResult``.

``run_build(request, listeners)`` is the flow; it prints nothing and chooses no exit code:

open a ``Session``, export ``$MARINBUILD_SERVE_URL`` for the steps, load and analyse, run the
requested steps with the listeners (a step already built is not run: a no-op plans every step as
built), record the code each step that succeeded ran (``marinbuild.engine.code_records``), and check the
built outputs for changed code.

Who owns what: ``cli.py`` turns flags into a ``BuildRequest``, hands over the listeners
(``marinbuild.ui.build_report``), prints the ``BuildResult`` and picks the exit code; this module
decides what happens and in which order.

A step that failed is part of the result (``failure``), not an exception: the build ran and its
listeners saw it. A request the build cannot honour (no target matches, ``--rebuild`` of a target
this build does not analyse, a step asking for resources the backend cannot give, a built output path that
holds another version's outputs) raises ``BuildRequestError`` before any step runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from marinbuild.analysis.session import Session
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.load.workspace import Workspace
    from marinbuild.run.events import Event, Listener
    from marinbuild.store.lease import LeaseRecord

__all__ = [
    "BuildListeners",
    "BuildRequest",
    "BuildRequestError",
    "BuildResult",
    "EventLogPlace",
    "PlanRow",
    "run_build",
]


class BuildRequestError(ValueError):
    """The command asks for something this build cannot do (exit 2); nothing ran."""


@dataclass(frozen=True)
class BuildRequest:
    """What one ``marinbuild build`` command line asks for.

    ``prefix`` … ``ray_address`` are ``Settings.resolve``'s inputs (None: the environment, else
    ``[tool.marinbuild]``); ``run_only`` are Marin's regexes over step names; ``rebuild`` are
    patterns of targets whose steps run again though built."""

    patterns: tuple[str, ...]
    prefix: str | None = None
    backend: str | None = None
    jobs: int | None = None
    keep_going: bool = False
    force_run_failed: bool | None = None
    ray_address: str | None = None
    dry_run: bool = False
    run_only: list[str] | None = None
    rebuild: tuple[str, ...] = ()

    def settings(self) -> dict[str, Any]:
        """The keyword arguments of ``Settings.resolve`` and ``Session.open``."""
        return {
            "prefix": self.prefix,
            "backend": self.backend,
            "jobs": self.jobs,
            "keep_going": self.keep_going,
            "force_run_failed": self.force_run_failed,
            "ray_address": self.ray_address,
        }


class EventLogPlace(NamedTuple):
    """Where this build's event log goes (``marinbuild.ui.event_log.open_event_log``'s arguments)."""

    cache_dir: Path
    patterns: list[str]
    prefix: str


class BuildListeners(Protocol):
    """The listeners a build's events go to, opened once the workspace and prefix are known."""

    def open(self, event_log: EventLogPlace) -> list[Listener]:
        """The listeners for this build; called once, just before the first event."""
        ...

    def close(self) -> None:
        """Called once after the last event, also when the run raised."""
        ...


class PlanRow(NamedTuple):
    """One step of the plan: its state (``built``, ``missing``, ...), output path, the lease another
    worker holds on it (or None), and whether this build runs it (or would, in a dry run)."""

    step: ExecutorStep
    state: str
    output_path: str
    lease: LeaseRecord | None
    will_run: bool


@dataclass
class BuildResult:
    """What a build did, for the command line to print.

    ``requested``: (label, output path) of each requested target's outputs; ``plan``: None if the
    run ended before planning; ``session``: the loaded and analysed session; ``failure``: the step
    failure that ended the run; ``dry_run_problems``: why the local backend could not run some steps
    of a dry run; ``code_changed``: built outputs whose code changed since they were built (not part
    of their key, so not rebuilt), with the changed files; ``succeeded``: the steps this build ran
    successfully, in the order they finished."""

    requested: list[tuple[str, str]]
    plan: list[PlanRow] | None
    session: Session
    failure: Exception | None = None
    dry_run_problems: list[str] = field(default_factory=list)
    code_changed: dict[ExecutorStep, list[str]] = field(default_factory=dict)
    succeeded: list[ExecutorStep] = field(default_factory=list)

    @property
    def would_run(self) -> list[str]:
        """Names of the planned steps that run (or would, in a dry run)."""
        return [row.step.name for row in self.plan or () if row.will_run]


def run_build(request: BuildRequest, listeners: BuildListeners) -> BuildResult:
    """Build what ``request`` asks for in the workspace of the working directory (see the module docstring)."""
    from marinbuild.analysis.session import Session

    session = Session.open(".", **request.settings())
    event_log = EventLogPlace(session.workspace.cache_dir, list(request.patterns), session.settings.prefix)
    _export_serve_url(session.workspace, session.settings.prefix)
    labels = session.load(request.patterns)
    if not labels:
        raise BuildRequestError(f"no targets match {' '.join(request.patterns)}")
    session.analyse(drop_declarations=True)  # nothing below reads a target's attributes or call site
    requested = [(str(label), path) for label in labels for path in session.output_paths_of(label)]
    rebuilt = _rebuild_steps(session, request.rebuild)
    result = BuildResult(requested, None, session)
    _run(request, listeners, session, event_log, result, session.requested_steps(), rebuilt)
    return result


class _Succeeded:
    """The listener collecting the output paths of the steps that succeeded, in the order they did."""

    def __init__(self) -> None:
        self.paths: list[str | None] = []

    def __call__(self, event: Event) -> None:
        if event.kind == "succeeded":
            self.paths.append(event.output_path)

    def planned_many(self, steps: Sequence[tuple[str, str]], state: str, data: dict[str, Any]) -> None:
        """Planned steps are not what it collects (``EventBus.emit_planned``)."""


def _run(
    request: BuildRequest,
    listeners: BuildListeners,
    session: Session,
    event_log: EventLogPlace,
    result: BuildResult,
    steps: list[ExecutorStep],
    rebuilt: list[ExecutorStep],
) -> None:
    """Run ``steps`` on the session's engine into ``result``: listeners, failures, code records, plan rows and
    changed code."""
    from marinbuild.engine import PreviousTaskFailedError, StepFailedError
    from marinbuild.run.resources import UnsatisfiableResourcesError
    from marinbuild.store.action_cache import ActionCacheCollisionError

    engine = session.engine
    assert engine is not None
    succeeded = _Succeeded()
    engine.listeners = [*listeners.open(event_log), succeeded]
    try:
        engine.run(
            steps,
            dry_run=request.dry_run,
            force_run_failed=session.settings.force_run_failed,
            max_concurrent=session.settings.jobs,
            run_only=request.run_only,
            rebuild=rebuilt,
        )
    except (StepFailedError, PreviousTaskFailedError) as exc:
        result.failure = exc
    except UnsatisfiableResourcesError as exc:  # nothing ran: the backend cannot give a step what it needs
        raise BuildRequestError(str(exc)) from exc
    except ActionCacheCollisionError as exc:  # found at planning, nothing ran: the message says what to rename
        raise BuildRequestError(str(exc)) from exc
    finally:
        listeners.close()
        by_path = {path: step for step, path in engine.output_paths.items()}
        result.succeeded = [by_path[path] for path in succeeded.paths if path in by_path]
        _record_code(session, result.succeeded)
    result.dry_run_problems = list(engine.dry_run_problems)
    if engine.plan is not None:
        result.plan = [
            PlanRow(step, p.state, engine.output_paths[step], p.lease, p.will_run)
            for step, p in engine.plan.steps.items()
        ]
        result.code_changed = _code_changed(session, [row.step for row in result.plan if row.state == "built"])


def _export_serve_url(workspace: Workspace, prefix: str) -> None:
    """``$MARINBUILD_SERVE_URL`` for this build (and the scripts it runs): the web view its pages are on, if any."""
    from marinbuild.engine.serve_url import ENV, serve_url

    url = serve_url(workspace.cache_dir, workspace.config, prefix)
    if url is not None:
        os.environ[ENV] = url


def _rebuild_steps(session: Session, patterns: tuple[str, ...]) -> list[ExecutorStep]:
    """The steps of the targets ``--rebuild`` names; each must be among the targets this build analysed."""
    if not patterns:
        return []
    assert session.loaded is not None and session.analysis is not None
    steps = []
    for pattern in patterns:
        for label in session.loaded.expand([pattern], session.current_package()):
            if label not in session.analysis.steps_of:
                raise BuildRequestError(
                    f"--rebuild {pattern}: {label} is not built by this command; add it to the targets"
                )
            steps.extend(session.steps_of(label))
    return steps


def _record_code(session: Session, steps: list[ExecutorStep]) -> None:
    """Record the code each step that succeeded ran, beside its output (``marinbuild.engine.code_records``)."""
    if not steps:
        return
    from marinbuild.engine.code_records import for_session, record

    assert session.engine is not None
    changes = for_session(session)
    for step in steps:
        record(session.engine.output_paths[step], changes.code_of(step))


def _code_changed(session: Session, built: list[Any]) -> dict[ExecutorStep, list[str]]:
    """The built steps whose recorded code differs from their code now, with the files that differ."""
    from marinbuild.engine.code_records import for_session

    return {step: files for step, files in for_session(session).check(built).items() if files}
