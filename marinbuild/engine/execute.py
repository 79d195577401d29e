"""Running a plan's steps: what each step's job calls, the backend, the resource check, the schedule, the failures.

``execute`` gets a plan with steps to run. It constructs the backend the settings name (or takes the given one, which it
does not shut down); refuses the run before anything is written if the backend cannot give some step what it asks for;
writes the ``.executor_info`` of steps not run and the run info (``commit.py``); schedules the steps
(``run/scheduler.py``, with checkpoint hand-offs, ``run/handoff.py``), each ``StepJob`` made as its step starts; then
turns failures into ``StepFailedError``, the first step's exception chained. A step from Marin's ``StepSpec`` keeps its
original (``ORIGINAL_STEP_SPEC``), whose function the job calls."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from marinbuild.core.placeholders import ORIGINAL_STEP_SPEC
from marinbuild.core.walk import max_mirror_budget
from marinbuild.engine import commit
from marinbuild.engine.errors import StepFailedError
from marinbuild.engine.infos import step_info_text
from marinbuild.engine.settings import Settings
from marinbuild.run import events as ev
from marinbuild.run.backends import make_backend
from marinbuild.run.handoff import HandOffs
from marinbuild.run.local import LocalBackend
from marinbuild.run.resources import UnsatisfiableResourcesError
from marinbuild.run.scheduler import Outcome, schedule
from marinbuild.run.step_call import StepCall
from marinbuild.run.step_job import LeaseSettings, StepJob
from marinbuild.store.action_cache import ActionKey

if TYPE_CHECKING:
    from marinbuild.core.graph import StepGraph
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.core.versions import VersionTable
    from marinbuild.run.backend import Backend
    from marinbuild.run.leases import BuildContext
    from marinbuild.run.plan import Plan


def execute(
    table: VersionTable,
    graph: StepGraph,
    plan: Plan,
    bus: ev.EventBus,
    settings: Settings,
    worker_id: str,
    given_backend: Backend | None,
    *,
    max_concurrent: int | None,
    selected: bool,
    context: BuildContext,
    write_run_info: Callable[[], None],
) -> Outcome[ExecutorStep]:
    """Run ``plan.to_run`` (not empty) on ``given_backend`` or one made for this run; ``write_run_info`` runs once
    nothing can refuse the run, before any step starts; ``selected``: narrowed by ``run_only``."""
    lease_settings = LeaseSettings()
    if settings.heartbeat_interval is not None:
        lease_settings.heartbeat_interval = settings.heartbeat_interval
    if settings.stale_after is not None:
        lease_settings.stale_after = settings.stale_after
    cancel = threading.Event()
    output_paths = table.output_paths

    def job_for(step: ExecutorStep) -> StepJob:
        """The step's job, made as it starts and dropped when done: only steps in flight hold one."""
        return StepJob(
            name=step.name,
            output_path=output_paths[step],
            call=calls[step],
            info_text=functools.partial(step_info_text, table, step),
            worker_id=worker_id,
            bus=bus,
            settings=lease_settings,
            cancel=cancel,
            action=ActionKey(table.action_digest(step), step.name, step.override_output_path is not None),
            context=context,
        )

    def describe(step: ExecutorStep) -> tuple[str, str]:
        return step.name, output_paths[step]

    backend: Backend
    if given_backend is None:  # a backend of this run's own
        backend, owned = make_backend(settings.backend, settings.backend_options(max_concurrent)), True
    else:
        backend, owned = given_backend, False
    try:
        calls = {step: call_for(step, table.configs[step], settings.prefix) for step in plan.to_run}
        check_resources(backend, calls.items())  # nothing written yet; each job takes its call from here
        commit.write_infos_not_run(table, graph, plan, selected)
        write_run_info()
        bus.emit(ev.BUILD_STARTED, data={"steps": len(plan.to_run)})
        outcome = schedule(
            plan.to_run,
            table.dependencies,
            job_for,
            describe,
            backend,
            bus,
            max_concurrent=max_concurrent,
            keep_going=settings.keep_going,
            cancel=cancel,
            holds=HandOffs(table, plan.to_run, bus),
        )
    finally:
        if owned:
            backend.shutdown()
    bus.emit(ev.BUILD_FINISHED, data={"ran": len(outcome.ran), "failed": len(outcome.failed)})
    if outcome.failed:
        failures = {step.name: exc for step, exc in outcome.failed.items()}
        error = StepFailedError(failures, [s.name for s in outcome.dep_failed])
        first = next(iter(outcome.failed.values()))
        raise error from (first.__cause__ or first)
    return outcome


def call_for(step: ExecutorStep, config: Any, prefix: str) -> StepCall:
    """The call of ``step`` with ``config`` (its instantiated config); ``ValueError`` for a step without a function."""
    original = getattr(step, ORIGINAL_STEP_SPEC, None)
    fn = step.fn if original is None else original.executor_function()
    if fn is None:
        raise ValueError(f"step {step.name} has no fn to run")
    return StepCall(
        fn,
        config,
        step.resources,
        step.pip_dependency_groups,
        mirror_budget_gb=max_mirror_budget(step.config),
        mirror_prefix=prefix,
    )


def resource_problems(backend: Backend, calls: Iterable[tuple[ExecutorStep, Callable[[], Any]]]) -> list[str]:
    """``"<step> <why>"`` for each step (with its call) the backend cannot give what it asks for."""
    check = getattr(backend, "check_resources", None)
    if check is None:
        return []
    problems = []
    for step, call in calls:
        try:
            request = call.request()[0] if isinstance(call, StepCall) else step.resources
        except (TypeError, ValueError) as exc:
            problems.append(f"{step.name}: {exc}")
            continue
        reason = check(request) if request is not None else None
        if reason:
            problems.append(f"{step.name} {reason}")
    return problems


def local_problems(calls: Iterable[tuple[ExecutorStep, Callable[[], Any]]]) -> list[str]:
    """``resource_problems`` on a local backend of one thread, shut down after."""
    backend = LocalBackend(1)
    try:
        return resource_problems(backend, calls)
    finally:
        backend.shutdown()


def check_resources(backend: Backend, calls: Iterable[tuple[ExecutorStep, Callable[[], Any]]]) -> None:
    """Refuse the run before anything starts if the backend cannot give some step what it asks for."""
    problems = resource_problems(backend, calls)
    if problems:
        name = getattr(backend, "name", type(backend).__name__)
        raise UnsatisfiableResourcesError(
            f"the {name} backend cannot run {len(problems)} step(s), so nothing ran: " + "; ".join(problems)
        )
