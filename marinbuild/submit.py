"""``marinbuild submit``: run a command on a Ray cluster through Ray's Job Submission API.

    marinbuild submit [--address URL] [--no_wait] [-e KEY VALUE]... -- COMMAND...

This replaces Marin's ``ray_run.py``. The workspace (the nearest folder with a
``pyproject.toml``) is shipped as the job's ``working_dir`` (minus
``runtime_env.WORKING_DIR_EXCLUDES`` and what ``.gitignore`` lists); the command runs
from the same relative folder it was typed in. ``-e`` sets environment variables;
``HF_TOKEN``, ``WANDB_API_KEY`` and ``MARIN_PREFIX`` are passed on when set here, as
Marin did. ``--extra NAME`` installs extras of the workspace (or packages) into the job's
environment. The job id goes to stdout; without ``--no_wait`` the job's logs follow,
and the exit code is the job's: 0 if it succeeded, the command's own exit code if it
failed with one, else 1. Ctrl-C stops following; the job keeps running.

The address is ``--address``, else ``RAY_API_SERVER_ADDRESS``, else ``RAY_ADDRESS``,
else ``http://127.0.0.1:8265`` (a dashboard URL, or any address ``ray.init`` takes).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from marinbuild.runtime_env import (
    RUNTIME_ENV_VARS_FROM_DRIVER,
    pip_requirements,
    project_root,
    workspace_runtime_env,
)

DEFAULT_ADDRESS = "http://127.0.0.1:8265"
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def resolve_address(address: str | None = None) -> str:
    return (address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
            or DEFAULT_ADDRESS)


@dataclass
class Submission:
    client: Any
    job_id: str
    address: str


def submit(command: Sequence[str], *, address: str | None = None, env_vars: dict[str, str] | None = None,
           working_dir: str | os.PathLike[str] | None = None, extras: Sequence[str] = (),
           submission_id: str | None = None) -> Submission:
    """Submit ``command`` as a Ray job with the workspace as its working_dir; return at once."""
    if not command:
        raise ValueError("submit needs a command after --")
    from ray.job_submission import JobSubmissionClient

    cwd = Path.cwd().resolve()
    root = Path(working_dir).resolve() if working_dir is not None else (project_root(cwd) or cwd)
    entrypoint = shlex.join(command)
    if cwd != root and cwd.is_relative_to(root):
        entrypoint = f"cd {shlex.quote(cwd.relative_to(root).as_posix())} && {entrypoint}"
    env = {k: os.environ[k] for k in RUNTIME_ENV_VARS_FROM_DRIVER if os.environ.get(k)}
    env.update(env_vars or {})
    runtime_env = workspace_runtime_env(root, env)
    if extras:
        runtime_env["pip"] = pip_requirements(list(extras), root)
        runtime_env["config"] = {"setup_timeout_seconds": 1800}
    resolved = resolve_address(address)
    client = JobSubmissionClient(resolved)
    job_id = client.submit_job(entrypoint=entrypoint, runtime_env=runtime_env, submission_id=submission_id)
    return Submission(client, job_id, resolved)


def follow(submission: Submission, out: TextIO | None = None) -> None:
    """Copy the job's logs to ``out`` (stdout) until it ends."""
    stream = out if out is not None else sys.stdout

    async def tail() -> None:
        async for chunk in submission.client.tail_job_logs(submission.job_id):
            stream.write(chunk)
            stream.flush()

    asyncio.run(tail())


def final_status(submission: Submission) -> tuple[str, int]:
    """The job's status name and the exit code it maps to (waits for the status to settle after its logs end)."""
    import time

    info = submission.client.get_job_info(submission.job_id)
    deadline = time.monotonic() + 30
    while str(_name(info.status)) not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.2)  # the logs ended just before the status was recorded
        info = submission.client.get_job_info(submission.job_id)
    status = _name(info.status)
    return status, exit_code(status, getattr(info, "driver_exit_code", None))


def exit_code(status: str, driver_exit_code: int | None = None) -> int:
    if status == "SUCCEEDED":
        return 0
    if status == "FAILED" and isinstance(driver_exit_code, int) and 0 < driver_exit_code < 256:
        return driver_exit_code
    return 1


def _name(status: Any) -> str:
    return getattr(status, "value", None) or str(status)
