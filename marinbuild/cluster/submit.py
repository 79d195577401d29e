"""``marinbuild submit [--cluster CONFIG | --address URL] [--tpu TYPE] [-e KEY VALUE]... -- COMMAND...``: run a command
on a Ray cluster through Ray's Job Submission API (replaces Marin's ``ray_run.py``; docs/cluster.md).

The workspace is the job's ``working_dir`` (minus ``runtime_env.WORKING_DIR_EXCLUDES`` and ``.gitignore``d files), the
command run from the folder it was typed in. ``HF_TOKEN``, ``WANDB_API_KEY``, ``MARIN_PREFIX`` are passed on,
``GIT_COMMIT`` set, as Marin did; ``--tpu`` adds one host's resources to ``entrypoint_resources``. The exit code is the
job's. The address: ``--address``, the head of ``--cluster``, ``RAY_API_SERVER_ADDRESS``, ``RAY_ADDRESS``,
``http://127.0.0.1:8265``."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.cluster.config import resolve_cluster
from marinbuild.cluster.jobs import TERMINAL, job_client, ray_errors, status_name
from marinbuild.core.resources import Resources, tpu_slice
from marinbuild.run.runtime_env import (
    RUNTIME_ENV_VARS_FROM_DRIVER,
    pip_requirements,
    project_root,
    workspace_runtime_env,
)

DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def resolve_address(address: str | None = None, cluster: str | None = None) -> str:
    """The job API address: ``address``, else ``cluster``'s head dashboard, else the environment's, else local."""
    if address:
        return address
    if cluster:
        cwd = Path.cwd()
        return resolve_cluster(cluster, [cwd, project_root(cwd) or cwd]).dashboard_url
    return os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS


def driver_resources(resources: dict[str, float] | None, tpu: str | None) -> dict[str, float] | None:
    """Custom resources the driver needs: ``resources`` plus one host of the TPU type ``tpu`` (Marin's ``--tpu``)."""
    if tpu is None:
        return dict(resources) if resources else None
    if tpu_slice(tpu).multi_host:
        raise ValueError(f"--tpu {tpu} spans several hosts; the driver runs on one (e.g. v4-8, v5litepod-4, v6e-8)")
    return {**(resources or {}), **Resources(tpu=tpu).ray_resources()}


def git_commit(folder: Path) -> str | None:
    """``git rev-parse HEAD`` of the checkout ``folder`` is in, or None outside one."""
    try:
        done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


@dataclass
class Submission:
    client: Any
    job_id: str
    address: str


def submit(
    command: Sequence[str],
    *,
    address: str | None = None,
    cluster: str | None = None,
    env_vars: dict[str, str] | None = None,
    working_dir: str | os.PathLike[str] | None = None,
    extras: Sequence[str] = (),
    submission_id: str | None = None,
    tpu: str | None = None,
    entrypoint_num_cpus: float | None = None,
    entrypoint_resources: dict[str, float] | None = None,
) -> Submission:
    """Submit ``command`` as a Ray job with the workspace as its working_dir; return at once."""
    if not command:
        raise ValueError("submit needs a command after --")
    resources = driver_resources(entrypoint_resources, tpu)
    resolved = resolve_address(address, cluster)
    cwd = Path.cwd().resolve()
    root = Path(working_dir).resolve() if working_dir is not None else (project_root(cwd) or cwd)
    pip = pip_requirements(list(extras), root) if extras else None  # a bad pyproject fails before connecting
    client = job_client(resolved)
    entrypoint = shlex.join(command)
    if cwd != root and cwd.is_relative_to(root):
        entrypoint = f"cd {shlex.quote(cwd.relative_to(root).as_posix())} && {entrypoint}"
    env = {k: os.environ[k] for k in RUNTIME_ENV_VARS_FROM_DRIVER if os.environ.get(k)}
    commit = git_commit(root)
    if commit:
        env["GIT_COMMIT"] = commit
    env.update(env_vars or {})
    runtime_env = workspace_runtime_env(root, env)
    if pip is not None:
        runtime_env["pip"] = pip
        runtime_env["config"] = {"setup_timeout_seconds": 1800}
    with ray_errors(resolved):
        job_id = client.submit_job(
            entrypoint=entrypoint,
            runtime_env=runtime_env,
            submission_id=submission_id,
            entrypoint_num_cpus=entrypoint_num_cpus,
            entrypoint_resources=resources,
        )
    return Submission(client, job_id, resolved)


def final_status(submission: Submission) -> tuple[str, int]:
    """The job's status name and the exit code it maps to (waits for the status to settle after its logs end)."""
    import time

    info = submission.client.get_job_info(submission.job_id)
    deadline = time.monotonic() + 30
    while status_name(info.status) not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.2)  # the logs ended just before the status was recorded
        info = submission.client.get_job_info(submission.job_id)
    status = status_name(info.status)
    return status, exit_code(status, getattr(info, "driver_exit_code", None))


def exit_code(status: str, driver_exit_code: int | None = None) -> int:
    if status == "SUCCEEDED":
        return 0
    if status == "FAILED" and isinstance(driver_exit_code, int) and 0 < driver_exit_code < 256:
        return driver_exit_code
    return 1
