"""``marinbuild jobs list | status JOB | logs JOB [-f] | stop JOB``: Ray jobs on a cluster, through Ray's SDK.

``job_client(address)`` connects (``JobSubmissionClient`` sends the Ray auth token itself); ``ray_errors(address)``
turns what Ray raises into one-line ``JobsError`` / ``RayAuthError`` (the CLI exits 2): an unreachable cluster, a
missing or refused token, an unknown job id. The functions return plain values."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from marinbuild.run.ray_auth import RayAuthError, auth_error, check_token, is_auth_failure

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


class JobsError(Exception):
    """The cluster cannot be reached, or it has no such job (exit 2)."""


@dataclass(frozen=True)
class JobRow:
    """One job as ``jobs list`` / ``jobs status`` show it (times are Unix seconds, None if not yet)."""

    submission_id: str
    status: str
    entrypoint: str
    message: str
    start_time: float | None
    end_time: float | None
    driver_exit_code: int | None
    job_id: str | None


def status_name(status: Any) -> str:
    return getattr(status, "value", None) or str(status)


@contextlib.contextmanager
def ray_errors(address: str, job: str | None = None) -> Iterator[None]:
    """Translate Ray's job client errors into one-line ``JobsError`` / ``RayAuthError``."""
    try:
        yield
    except (JobsError, RayAuthError):
        raise
    except ConnectionError as exc:
        raise JobsError(f"cannot reach the Ray cluster at {address}: {_first_line(exc)}") from exc
    except Exception as exc:
        if is_auth_failure(exc):
            raise auth_error(address) from exc
        text = str(exc)
        if job is not None and ("does not exist" in text or "404" in text):
            raise JobsError(f"no job {job} on the Ray cluster at {address} (see `marinbuild jobs list`)") from exc
        if type(exc).__name__ == "RuntimeError" and "Request failed" in text:
            raise JobsError(f"the Ray cluster at {address} answered: {_first_line(exc)}") from exc
        raise


def job_client(address: str) -> Any:
    """A ``JobSubmissionClient`` for the dashboard at ``address`` (checks the token first if auth is on)."""
    check_token()
    from ray.job_submission import JobSubmissionClient

    with ray_errors(address):
        return JobSubmissionClient(address)


def list_jobs(client: Any, address: str) -> list[JobRow]:
    with ray_errors(address):
        jobs = client.list_jobs()
    rows = [_row(job) for job in jobs]
    return sorted(rows, key=lambda r: (r.start_time is None, r.start_time or 0.0, r.submission_id))


def job_status(client: Any, address: str, job: str) -> JobRow:
    with ray_errors(address, job):
        return _row(client.get_job_info(job), job)


def job_logs(client: Any, address: str, job: str) -> str:
    with ray_errors(address, job):
        return client.get_job_logs(job)


def follow_logs(client: Any, address: str, job: str, out: TextIO) -> None:
    """Copy the job's logs to ``out`` as they come, until the job ends."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job):
            out.write(chunk)
            out.flush()

    with ray_errors(address, job):
        client.get_job_info(job)  # an unknown job is an error here, not a silent empty stream
        asyncio.run(tail())


def stop_job(client: Any, address: str, job: str) -> bool:
    """Ask the cluster to stop the job; False if it had already ended."""
    with ray_errors(address, job):
        return bool(client.stop_job(job))


def _row(job: Any, job_id: str | None = None) -> JobRow:
    submission_id = getattr(job, "submission_id", None) or job_id or getattr(job, "job_id", None) or ""
    return JobRow(
        submission_id=str(submission_id),
        status=status_name(job.status),
        entrypoint=str(getattr(job, "entrypoint", "") or ""),
        message=str(getattr(job, "message", "") or ""),
        start_time=_seconds(getattr(job, "start_time", None)),
        end_time=_seconds(getattr(job, "end_time", None)),
        driver_exit_code=getattr(job, "driver_exit_code", None),
        job_id=getattr(job, "job_id", None),
    )


def _seconds(millis: Any) -> float | None:
    return millis / 1000.0 if isinstance(millis, int | float) and millis else None


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__
