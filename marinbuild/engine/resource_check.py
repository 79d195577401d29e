"""Whether a run's backend can give every step what it asks for: if not, the whole run is refused before anything
is written (``UnsatisfiableResourcesError``); a dry run on the local backend reports it as ``dry_run_problems``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from marinbuild.run.local import LocalBackend
from marinbuild.run.resources import UnsatisfiableResourcesError
from marinbuild.run.step_call import StepCall

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.run.backend import Backend


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
