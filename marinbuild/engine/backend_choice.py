"""Which backend a run uses, and whether it can give every step what the step asks for.

An engine is given a backend object (the caller owns it), a backend name, or nothing: then
``$MARINBUILD_BACKEND``, else Ray inside a job submitted to a Ray cluster, else local threads. A run that
constructs its backend from a name shuts it down when it ends. Before anything is written, the run asks the
backend about every step's resource request and refuses the whole run if one cannot be met
(``UnsatisfiableResourcesError``); a dry run on the local backend reports the same as ``dry_run_problems``.
The backend modules load here only when a run has steps to start (a no-op loads none of them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.run.backend import Backend

BACKEND_ENV = "MARINBUILD_BACKEND"
"""The backend of an engine given none (a Marin script's ``executor_main``): ``local`` or ``ray``."""


def default_backend() -> str:
    """``$MARINBUILD_BACKEND`` if set; else ``"ray"`` in a job submitted to a Ray cluster (a Marin script sent to the
    cluster runs its steps there, as Marin's executor does), else ``"local"``."""
    from marinbuild.run.backends import LOCAL, RAY
    from marinbuild.run.runtime_env import in_ray_job

    return os.environ.get(BACKEND_ENV) or (RAY if in_ray_job() else LOCAL)


def backend_named(name: str, max_concurrent: int | None) -> Backend:
    """A new backend of the run: ``"local"`` (threads of this process) or ``"ray"`` (a Ray cluster: ``RAY_ADDRESS``,
    else a private local instance; the workspace around the current folder is shipped to a cluster, as the CLI
    ships it)."""
    from marinbuild.run.backends import BACKEND_NAMES, BackendOptions, make_backend

    if name not in BACKEND_NAMES:
        raise ValueError(
            f"unknown backend {name!r} (from {BACKEND_ENV} or Executor(backend=...)): "
            f"use {', '.join(map(repr, BACKEND_NAMES))} or a backend object"
        )
    return make_backend(name, BackendOptions(max_concurrent=max_concurrent))


def is_local(backend: Backend | str | None) -> bool:
    """Whether ``backend`` (an engine's setting) means the local backend."""
    from marinbuild.run.backends import LOCAL

    return backend == LOCAL or (backend is None and default_backend() == LOCAL)


def resource_problems(backend: Backend, calls: Iterable[tuple[ExecutorStep, Callable[[], Any]]]) -> list[str]:
    """``"<step> <why>"`` for each step (with its call) the backend cannot give what it asks for."""
    from marinbuild.run.step_call import StepCall

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
    from marinbuild.run.local import LocalBackend

    backend = LocalBackend(1)
    try:
        return resource_problems(backend, calls)
    finally:
        backend.shutdown()


def check_resources(backend: Backend, calls: Iterable[tuple[ExecutorStep, Callable[[], Any]]]) -> None:
    """Refuse the run before anything starts if the backend cannot give some step what it asks for."""
    from marinbuild.run.resources import UnsatisfiableResourcesError

    problems = resource_problems(backend, calls)
    if problems:
        name = getattr(backend, "name", type(backend).__name__)
        raise UnsatisfiableResourcesError(
            f"the {name} backend cannot run {len(problems)} step(s), so nothing ran: " + "; ".join(problems)
        )
