"""The backends a build can name: the one list of their names (``--backend``, the ``backend`` setting,
``Engine(backend=...)``) and ``make_backend``. A constructor imports its backend's module when called: the CLI
imports this module at startup, which must load no backend's code."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marinbuild.run.runtime_env import project_root

if TYPE_CHECKING:
    from marinbuild.run.backend import Backend

LOCAL = "local"  # threads of this process (run.local)
RAY = "ray"  # a Ray cluster, or a private local instance (run.ray_backend)


@dataclass(frozen=True)
class BackendOptions:
    """What a backend is constructed with (each reads its own fields); None: the backend's default."""

    max_concurrent: int | None = None  # local: steps run at once
    ray_address: str | None = None  # None: RAY_ADDRESS, else a private local instance
    ray_max_retries: int | None = None  # retries of a Ray task whose worker died
    working_dir: str | os.PathLike[str] | None = None  # shipped to a Ray cluster (None: the current project)


def _local(options: BackendOptions) -> Backend:
    from marinbuild.run.local import LocalBackend

    return LocalBackend(options.max_concurrent)


def _ray(options: BackendOptions) -> Backend:
    from marinbuild.run.ray_backend import DEFAULT_MAX_RETRIES, RayBackend

    return RayBackend(
        address=options.ray_address,
        max_retries=options.ray_max_retries if options.ray_max_retries is not None else DEFAULT_MAX_RETRIES,
        working_dir=options.working_dir if options.working_dir is not None else project_root(),
    )


_CONSTRUCTORS: dict[str, Callable[[BackendOptions], Backend]] = {LOCAL: _local, RAY: _ray}

BACKEND_NAMES: tuple[str, ...] = tuple(_CONSTRUCTORS)  # Every backend name, in the order usage messages list them.


def make_backend(name: str, options: BackendOptions | None = None) -> Backend:
    """A new backend ``name`` constructed with ``options``; ``KeyError`` if no backend has that name."""
    return _CONSTRUCTORS[name](options or BackendOptions())
