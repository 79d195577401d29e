"""Where outputs go and how steps run: one resolution, for the command line and for Marin scripts alike.

``Settings.resolve(workspace, ...)`` keeps what the caller was given and fills the rest, each from the first of:

- ``prefix``: ``$MARIN_PREFIX``, ``[tool.marinbuild] prefix`` (relative to the workspace root), ``/tmp/marin``;
  ``executor_info_base_path``: ``<prefix>/experiments``;
- ``backend``: ``ray`` given a Ray address, ``$MARINBUILD_BACKEND``, ``[tool.marinbuild] backend``, ``ray`` in a Ray
  job, ``local``; ``ray_address``: ``$RAY_ADDRESS``, ``[tool.marinbuild] ray_address`` (None: a private local Ray);
- ``jobs``, ``force_run_failed``, ``heartbeat_interval``, ``stale_after``, ``ray_max_retries``: ``[tool.marinbuild]``,
  the engine's defaults;
- ``root`` (code records' base, what Ray is sent): the workspace root, the nearest ``pyproject.toml``, the current
  folder; ``cache_dir``: the workspace's ``.marinbuild`` (None outside one)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marinbuild.run.backends import BACKEND_NAMES, LOCAL, RAY, BackendOptions
from marinbuild.run.runtime_env import in_ray_job, project_root
from marinbuild.store.fs import DEFAULT_LOCAL_PREFIX

if TYPE_CHECKING:
    from marinbuild.load.workspace import Workspace

BACKEND_ENV = "MARINBUILD_BACKEND"  # the backend of a build that names none


class SettingsError(ValueError):
    """A bad value in ``[tool.marinbuild]``, a flag or an argument, named (the command line's exit 2)."""


@dataclass(frozen=True)
class Settings:
    """Where outputs go and how steps run (the module docstring says where each value comes from)."""

    prefix: str
    executor_info_base_path: str
    backend: str = LOCAL
    jobs: int | None = None
    keep_going: bool = False
    force_run_failed: bool = True
    heartbeat_interval: float | None = None
    stale_after: float | None = None
    ray_address: str | None = None
    ray_max_retries: int | None = None
    root: Path | None = None
    cache_dir: Path | None = None

    @classmethod
    def resolve(
        cls,
        workspace: Workspace | None,
        *,
        prefix: str | None = None,
        executor_info_base_path: str | None = None,
        backend: str | None = None,
        jobs: int | None = None,
        keep_going: bool = False,
        force_run_failed: bool | None = None,
        ray_address: str | None = None,
        heartbeat_interval: float | None = None,
        stale_after: float | None = None,
    ) -> Settings:
        config: dict[str, Any] = workspace.config if workspace is not None else {}
        chosen = prefix or os.environ.get("MARIN_PREFIX")
        if not chosen:
            chosen = config.get("prefix")
            if chosen is not None and not isinstance(chosen, str):
                raise SettingsError("[tool.marinbuild] prefix must be a string")
            if chosen and workspace is not None and "://" not in chosen and not os.path.isabs(chosen):
                chosen = str((workspace.root / chosen).resolve())
            chosen = chosen or DEFAULT_LOCAL_PREFIX
        chosen = chosen.rstrip("/") if chosen != "/" else chosen
        if jobs is not None and jobs < 1:
            raise SettingsError(f"--jobs must be at least 1, got {jobs}")
        if "ray_bundle_seconds" in config:
            raise SettingsError("[tool.marinbuild] ray_bundle_seconds is not a setting: each Ray step is a task")
        return cls(
            prefix=chosen,
            executor_info_base_path=executor_info_base_path or _join(chosen, "experiments"),
            backend=_backend(backend, ray_address, config),
            jobs=jobs if jobs is not None else _setting(config, "jobs", int, "a positive integer", minimum=1),
            keep_going=keep_going,
            force_run_failed=(
                force_run_failed if force_run_failed is not None else bool(config.get("force_run_failed", True))
            ),
            heartbeat_interval=heartbeat_interval
            if heartbeat_interval is not None
            else _setting(config, "heartbeat_interval", (int, float), "a number of seconds", minimum=0),
            stale_after=stale_after
            if stale_after is not None
            else _setting(config, "stale_after", (int, float), "a number of seconds", minimum=0),
            ray_address=_ray_address(ray_address, config),
            ray_max_retries=_setting(config, "ray_max_retries", int, "a non-negative integer", minimum=0),
            root=workspace.root if workspace is not None else (project_root() or Path.cwd()),
            cache_dir=workspace.cache_dir if workspace is not None else None,
        )

    def backend_options(self, max_concurrent: int | None = None) -> BackendOptions:
        """What a run's backend is made with (``run.backends.make_backend(self.backend, ...)``)."""
        return BackendOptions(
            max_concurrent=max_concurrent,
            ray_address=self.ray_address,
            ray_max_retries=self.ray_max_retries,
            working_dir=self.root,
        )


def _join(prefix: str, name: str) -> str:
    return prefix + "/" + name if "://" in prefix else os.path.join(prefix, name)


def _backend(given: str | None, ray_address: str | None, config: dict[str, Any]) -> str:
    # A Ray address given alone means the Ray backend ($RAY_ADDRESS alone does not: it is set inside every Ray job).
    name = given or (RAY if ray_address else None) or os.environ.get(BACKEND_ENV) or config.get("backend")
    if name is None:
        name = RAY if in_ray_job() else LOCAL
    if name not in BACKEND_NAMES:
        raise SettingsError(f"unknown backend {name!r}; use one of: {', '.join(BACKEND_NAMES)}")
    return str(name)


def _ray_address(given: str | None, config: dict[str, Any]) -> str | None:
    address = given or os.environ.get("RAY_ADDRESS") or config.get("ray_address") or None
    if address is not None and not isinstance(address, str):
        raise SettingsError("[tool.marinbuild] ray_address must be a string")
    return address


def _setting(config: dict[str, Any], key: str, kind: Any, expected: str, *, minimum: float) -> Any:
    """``[tool.marinbuild] key``, checked: None when absent."""
    value = config.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, kind) or value < minimum):
        raise SettingsError(f"[tool.marinbuild] {key} must be {expected}, got {value!r}")
    return value
