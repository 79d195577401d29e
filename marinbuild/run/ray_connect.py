"""Connecting the Ray backend's driver to a cluster, or starting a private local Ray instance.

With an address (else ``RAY_ADDRESS``), connect, shipping the workspace as ``working_dir`` unless inside a submitted
job; else start a local instance on 127.0.0.1 (no dashboard, token file or usage report). Tasks' output goes to stderr,
Ray's messages to a log (``run.ray_log``). A token or connection problem is a one-line ``RayAuthError``; a local
instance that fails to start twice (Ray's fixed 30 s limit on a busy machine) a ``LocalRayStartError``, the CLI's exit
36."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any

from marinbuild.run.ray_auth import auth_error, check_token, connect_error, is_auth_failure
from marinbuild.run.ray_log import RayLog, default_log_path, verbose_from_env
from marinbuild.run.ray_task import Relocation
from marinbuild.run.runtime_env import in_ray_job, workspace_runtime_env

logger = logging.getLogger("marinbuild")
LOCAL_START_ATTEMPTS = 2


class LocalRayStartError(RuntimeError):
    """A private local Ray instance could not be started on this machine."""


def connect_ray(
    address: str | None,
    *,
    working_dir: str | os.PathLike[str] | None,
    env_vars: dict[str, str],
    log_to_driver: bool,
    init_options: dict[str, Any],
    log: RayLog | None = None,
) -> Relocation | None:
    """``ray.init`` as the module docstring says; where workspace paths in a config move to (a shipped workspace)."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": log_to_driver}
    if address:
        relocation = _init_cluster(address, options, working_dir, env_vars, init_options)
    else:
        _init_local(options, working_dir, env_vars, init_options)
        relocation = None
    (log or RayLog(default_log_path(working_dir), verbose_from_env())).install()
    return relocation


def _init_cluster(
    address: str,
    options: dict[str, Any],
    working_dir: str | os.PathLike[str] | None,
    env_vars: dict[str, str],
    init_options: dict[str, Any],
) -> Relocation | None:
    import ray

    relocation = None
    if working_dir is not None and not in_ray_job():
        options["runtime_env"] = workspace_runtime_env(working_dir, env_vars)
        relocation = Relocation(str(Path(working_dir).resolve()))
    elif env_vars:
        options["runtime_env"] = {"env_vars": dict(env_vars)}
    options.update(init_options)
    check_token()
    try:
        ray.init(address=address, **options)
    except ConnectionError as exc:
        raise connect_error(address, exc) from exc
    except Exception as exc:
        if is_auth_failure(exc):
            raise auth_error(address) from exc
        raise
    return relocation


def _init_local(
    options: dict[str, Any],
    working_dir: str | os.PathLike[str] | None,
    env_vars: dict[str, str],
    init_options: dict[str, Any],
) -> None:
    # Ray swaps 127.0.0.1 for this machine's address unless it is told there is no cluster to join; no
    # token file to write for a loopback instance, no usage report to send.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    with contextlib.suppress(ImportError, AttributeError):
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False  # if ray was imported before the variable was set
    env_vars = dict(env_vars)
    code_path = _driver_code_path()
    if working_dir is not None:
        code_path = list(dict.fromkeys([str(Path(working_dir).resolve()), *code_path]))
    if code_path:
        inherited = env_vars.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
        env_vars["PYTHONPATH"] = os.pathsep.join([*code_path, *([inherited] if inherited else [])])
    if env_vars:
        options["runtime_env"] = {"env_vars": env_vars}
    options.update({"_node_ip_address": "127.0.0.1", "include_dashboard": False})
    options.update(init_options)
    hook = sys.excepthook
    for attempt in range(1, LOCAL_START_ATTEMPTS + 1):
        try:
            ray.init(address="local", **options)
            break
        except Exception as exc:
            ray.shutdown()  # whatever the failed start left running
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if attempt == LOCAL_START_ATTEMPTS:
                raise LocalRayStartError(
                    f"could not start a local Ray instance, {attempt} attempts ({why}); on a busy machine Ray's node "
                    "can miss its 30 s start-up limit: try again, or run on a cluster (--ray_address ADDRESS)"
                ) from exc
            logger.warning("marinbuild: a local Ray instance did not start (%s); trying once more", why)
    # Ray's hook reports an uncaught exception of this process to its GCS, which can hold the exit for a
    # minute; nobody reads that report for a private instance.
    sys.excepthook = hook


def _driver_code_path() -> list[str]:
    """Folders on this process's ``sys.path`` besides the interpreter's own and installed packages."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(path) or "site-packages" in path or "dist-packages" in path:
            continue
        if any(path == p or path.startswith(p + os.sep) for p in prefixes):
            continue
        if path not in out:
            out.append(path)
    return out
