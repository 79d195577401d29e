"""One ``marinbuild build``: from the patterns and flags of a command line to the engine's ``BuildResult``.

``run_build`` opens a ``Session``, loads and analyses the targets and hands their steps to the engine's ``build``; it
prints nothing and picks no exit code. A request it cannot honour raises ``BuildRequestError`` before any step runs, and
the listeners hear of it (the event log says so)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from marinbuild.analysis.session import Session
from marinbuild.engine.build import build
from marinbuild.engine.errors import PreviousTaskFailedError
from marinbuild.engine.serve_url import ENV, serve_url
from marinbuild.run.resources import UnsatisfiableResourcesError
from marinbuild.store.action_cache import ActionCacheCollisionError

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.engine.build import BuildResult
    from marinbuild.run.events import Listener


class BuildRequestError(ValueError):
    """The command asks for something this build cannot do (exit 2); nothing ran."""


@dataclass(frozen=True)
class BuildRequest:
    """What one ``marinbuild build`` command line asks for: ``prefix`` … ``ray_address`` are ``Settings.resolve``'s
    inputs; ``run_only`` Marin's regexes over step names; ``rebuild`` patterns of targets to run again though built."""

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
            k: getattr(self, k) for k in ("prefix", "backend", "jobs", "keep_going", "force_run_failed", "ray_address")
        }


class EventLogPlace(NamedTuple):
    """Where this build's event log goes (``marinbuild.ui.event_log.open_event_log``'s arguments)."""

    cache_dir: Path
    patterns: list[str]
    prefix: str


class BuildListeners(Protocol):
    """The listeners a build's events go to: ``open`` is called once the workspace and prefix are known, before
    the targets load (a build refused at loading is recorded too); ``refused`` at most once, when the build ended
    with an error instead of a result or refused to retry steps that failed before (the result's
    ``PreviousTaskFailedError``); ``close`` once after the last event, also when the run raised."""

    def open(self, event_log: EventLogPlace, session: Session) -> list[Listener]: ...

    def refused(self, error: Exception) -> None: ...

    def close(self) -> None: ...


def run_build(request: BuildRequest, listeners: BuildListeners) -> tuple[Session, BuildResult]:
    """Build what ``request`` asks for in the workspace of the working directory."""
    session = Session.open(".", **request.settings())
    event_log = EventLogPlace(session.workspace.cache_dir, list(request.patterns), session.settings.prefix)
    url = serve_url(session.workspace.cache_dir, session.workspace.config, session.settings.prefix)
    if url is not None:
        os.environ[ENV] = url  # the web view of this build's pages, for its steps and the scripts it runs
    opened = listeners.open(event_log, session)
    try:
        result = _build(request, session, opened)
        if isinstance(result.failure, PreviousTaskFailedError):  # planned, then refused to retry failed steps
            listeners.refused(result.failure)
    except Exception as exc:  # refused, mostly before any step ran (a step's own failure is in the result)
        listeners.refused(exc)
        raise
    finally:
        listeners.close()
    return session, result


def _build(request: BuildRequest, session: Session, listeners: list[Listener]) -> BuildResult:
    """Load and analyse ``request``'s targets in ``session`` and build their steps."""
    labels = session.load(request.patterns)
    if not labels:
        raise BuildRequestError(f"no targets match {' '.join(request.patterns)}")
    session.analyse(drop_declarations=True)  # nothing below reads a target's attributes or call site
    engine = session.engine
    assert engine is not None
    requested = [(str(label), path) for label in labels for path in session.output_paths_of(label)]
    rebuilt = _rebuild_steps(session, request.rebuild)
    engine.listeners = listeners
    try:
        return build(
            engine,
            session.requested_steps(),
            requested=requested,
            dry_run=request.dry_run,
            run_only=request.run_only,
            force_run_failed=session.settings.force_run_failed,
            max_concurrent=session.settings.jobs,
            rebuild=rebuilt,
        )
    except (UnsatisfiableResourcesError, ActionCacheCollisionError) as exc:  # nothing ran; the message says why
        raise BuildRequestError(str(exc)) from exc


def _rebuild_steps(session: Session, patterns: tuple[str, ...]) -> list[ExecutorStep]:
    """The steps ``--rebuild`` names: a step's name (e.g. one no label names), else the steps of a pattern's targets."""
    if not patterns:
        return []
    assert session.loaded is not None and session.analysis is not None and session.engine is not None
    by_name: dict[str, list[ExecutorStep]] = {}
    for step in session.engine.steps:
        by_name.setdefault(step.name, []).append(session.engine.canonicalize(step))
    steps: list[ExecutorStep] = []
    for pattern in patterns:
        if pattern in by_name:
            steps.extend(dict.fromkeys(by_name[pattern]))
            continue
        for label in session.loaded.expand([pattern], session.current_package()):
            if label not in session.analysis.steps_of:
                raise BuildRequestError(
                    f"--rebuild {pattern}: {label} is not built by this command; add it to the targets"
                )
            steps.extend(session.steps_of(label))
    return steps
