"""How ``marinbuild jobs list`` and ``jobs status`` show Ray jobs: a rich table, one job's fields a line, or JSON; times
in UTC. Nothing here talks to a cluster."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from marinbuild.cluster.jobs import JobRow

STATUS_STYLES = {"SUCCEEDED": "green", "FAILED": "red", "STOPPED": "yellow", "RUNNING": "cyan", "PENDING": "blue"}


def print_jobs(rows: Sequence[JobRow], out: TextIO, width: int | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("SUBMISSION ID", "STATUS", "START (UTC)", "RUN TIME", "ENTRYPOINT"):
        table.add_column(column, no_wrap=column != "ENTRYPOINT", overflow="fold")
    for row in rows:
        style = STATUS_STYLES.get(row.status, "")
        table.add_row(
            row.submission_id,
            f"[{style}]{row.status}[/]" if style else row.status,
            _when(row.start_time),
            _run_time(row),
            row.entrypoint,
        )
    console = Console(file=out, width=width or (None if out.isatty() else 200), highlight=False)
    console.print(table if rows else "no jobs")


def print_job(row: JobRow, out: TextIO) -> None:
    fields = [
        ("submission id", row.submission_id),
        ("status", row.status),
        ("entrypoint", row.entrypoint),
        ("started", _when(row.start_time)),
        ("ended", _when(row.end_time)),
        ("run time", _run_time(row)),
    ]
    if row.driver_exit_code is not None:
        fields.append(("exit code", str(row.driver_exit_code)))
    if row.message:
        fields.append(("message", row.message))
    for name, value in fields:
        out.write(f"{name + ':':<15}{value}\n")


def jobs_json(rows: Sequence[JobRow] | JobRow) -> str:
    return json.dumps([asdict(row) for row in rows] if isinstance(rows, Sequence) else asdict(rows), indent=2)


def _when(seconds: float | None) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S") if seconds else "-"


def _run_time(row: JobRow) -> str:
    if not row.start_time:
        return "-"
    total = max(0, int((row.end_time or datetime.now(UTC).timestamp()) - row.start_time))
    hours, rest = divmod(total, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"
