"""Marin's ``remote`` wrapper: a step function plus where and how it should run, e.g. ``@remote(resources=tpu("v4-8"),
pip_dependency_groups=["tpu"], env_vars={...})``.

Calling the ``RemoteCallable`` runs the function here (the local backend, tests, ``materialize``); the Ray backend runs
it as a task with its ``resources`` (any form ``core.resources.normalize`` reads; ``ExecutorStep.resources`` wins),
``pip_dependency_groups`` and ``env_vars``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, TypeVar, overload

from marinbuild.core.resources import normalize

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class RemoteCallable(Generic[P, R]):
    """A function and the resources, extras and environment variables it runs with."""

    fn: Callable[P, R]
    resources: Any = None
    env_vars: dict[str, str] = field(default_factory=dict)
    pip_dependency_groups: list[str] = field(default_factory=list)
    name: str | None = None

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    @property
    def __name__(self) -> str:  # what logs and Ray task names show
        return self.name or str(getattr(self.fn, "__name__", "remote"))


@overload
def remote(
    fn: Callable[P, R],
    *,
    resources: Any = None,
    pip_dependency_groups: list[str] | None = None,
    env_vars: dict[str, str] | None = None,
    name: str | None = None,
) -> RemoteCallable[P, R]: ...


@overload
def remote(
    fn: None = None,
    *,
    resources: Any = None,
    pip_dependency_groups: list[str] | None = None,
    env_vars: dict[str, str] | None = None,
    name: str | None = None,
) -> Callable[[Callable[P, R]], RemoteCallable[P, R]]: ...


def remote(
    fn: Callable[P, R] | None = None,
    *,
    resources: Any = None,
    pip_dependency_groups: list[str] | None = None,
    env_vars: dict[str, str] | None = None,
    name: str | None = None,
) -> RemoteCallable[P, R] | Callable[[Callable[P, R]], RemoteCallable[P, R]]:
    """Mark ``fn`` to run with ``resources`` (and extras, env vars): ``remote(fn, ...)`` or ``@remote(...)``."""
    if resources is not None:
        normalize(resources)  # a bad request is an error here, not when the step runs

    def wrap(f: Callable[P, R]) -> RemoteCallable[P, R]:
        return RemoteCallable(
            fn=f,
            resources=resources,
            env_vars=dict(env_vars or {}),
            pip_dependency_groups=list(pip_dependency_groups or []),
            name=name,
        )

    return wrap(fn) if fn is not None else wrap
