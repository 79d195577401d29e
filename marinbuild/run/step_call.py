"""A step's call: its function, its resolved config, and what it asks the backend for.

Calling it runs the step here (the local backend); the Ray backend runs ``target`` with ``config`` as a task with
``request()``. A ``RemoteCallable`` (ours or Marin's ``remote(...)``) carries resources, extras and env vars, a
``@ray.remote`` function Ray options; ``ExecutorStep.resources`` wins over a wrapper's, extras of both are used. A step
runs in ``store.mirror.step_scope``: its ``mirror://`` copies are charged to its own budget (the largest ``mirrored(...,
budget_gb=...)``, as Marin) and land under the build's prefix. The scope is a ``contextvars`` one: threads the step
starts inherit it only in ``contextvars.copy_context()``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marinbuild.core.resources import Resources, normalize
from marinbuild.store import region


def is_ray_remote_function(fn: Any) -> bool:
    """``fn`` is a ``@ray.remote`` function (told without importing ray)."""
    return type(fn).__module__ == "ray.remote_function" and hasattr(fn, "_function")


def _is_remote_wrapper(fn: Any) -> bool:
    """Marin's (or our) ``RemoteCallable``: a function plus resources, extras and env vars."""
    return callable(getattr(fn, "fn", None)) and hasattr(fn, "resources") and hasattr(fn, "pip_dependency_groups")


@dataclass(frozen=True)
class MirrorScope:
    """The ``mirror://`` settings a step's function runs with (picklable: sent to Ray workers)."""

    budget_gb: float | None = None
    """The step's transfer budget: the largest ``mirrored(path, budget_gb=...)`` of its config; None: it has none."""
    prefix: str | None = None
    """The build's prefix: where ``mirror://`` copies go (None: ``mirror``'s own configuration)."""

    def run(self, fn: Callable[[Any], Any], config: Any) -> Any:
        """``fn(config)`` in this scope (``store.mirror`` imported only with a budget or if imported already), after
        the region guard (``store/region.py``): a large read from another region fails the step first."""
        region.check_reads(config)
        if self.budget_gb is None and "marinbuild.store.mirror" not in sys.modules:
            return fn(config)
        from marinbuild.store import mirror  # lazy: rigging and google-cloud-storage

        with mirror.step_scope(self.budget_gb, self.prefix):
            return fn(config)


@dataclass(frozen=True)
class StepCall:
    """One step's call, as a backend receives it (``Any``: the user's function, config and resources, as given)."""

    fn: Any
    config: Any
    resources: Any = None
    pip_dependency_groups: list[str] | None = None
    mirror_budget_gb: float | None = None  # MirrorScope's, from the raw config (max_mirror_budget)
    mirror_prefix: str | None = None  # MirrorScope's: the build's prefix

    @property
    def mirror(self) -> MirrorScope:
        """What the step's function runs in; a Ray worker gets this with the config."""
        return MirrorScope(self.mirror_budget_gb, self.mirror_prefix)

    @property
    def wrapped(self) -> Any:
        """The function without a ``RemoteCallable`` around it (may still be a ``@ray.remote`` function)."""
        fn = self.fn
        while _is_remote_wrapper(fn):
            fn = fn.fn
        return fn

    @property
    def target(self) -> Any:
        """The plain Python function to call."""
        fn = self.wrapped
        return fn._function if is_ray_remote_function(fn) else fn

    def __call__(self) -> Any:
        return self.mirror.run(self.target, self.config)

    def request(self) -> tuple[Resources | None, list[str], dict[str, str]]:
        """(resources, pip dependency groups, env vars) this step asks for."""
        resources = self.resources
        groups = list(self.pip_dependency_groups or [])
        env: dict[str, str] = {}
        fn = self.fn
        while _is_remote_wrapper(fn):
            resources = fn.resources if resources is None else resources
            groups.extend(g for g in fn.pip_dependency_groups or [] if g not in groups)
            env = {**dict(getattr(fn, "env_vars", None) or {}), **env}
            fn = fn.fn
        if resources is None and is_ray_remote_function(fn):
            resources = _ray_default_options(fn)
        return (None if resources is None else normalize(resources)), groups, env


def _ray_default_options(fn: Any) -> Resources | None:
    """What a ``@ray.remote(num_gpus=..., resources=...)`` function asks for, as ``Resources``."""
    options = getattr(fn, "_default_options", None) or {}
    custom = dict(options.get("resources") or {})
    if not custom and options.get("num_gpus") is None and options.get("num_cpus") is None:
        return None

    return Resources(
        cpu=options.get("num_cpus"), gpu=options.get("num_gpus"), memory=options.get("memory"), custom=custom
    )
