"""The ``.executor_status`` file: one word (RUNNING, SUCCESS, FAILED, DEP_FAILED).

Writes the one-word form Marin writes today; reads Marin's legacy JSON-lines event log
too. A file that is neither is an error naming the file, never a silent state.
"""

from __future__ import annotations

import json
import os
import time

from marinbuild.store import fs

STATUS_RUNNING = "RUNNING"
STATUS_SUCCESS = "SUCCESS"
STATUS_FAILED = "FAILED"
STATUS_DEP_FAILED = "DEP_FAILED"
STATUSES = (STATUS_RUNNING, STATUS_SUCCESS, STATUS_FAILED, STATUS_DEP_FAILED)
STATUS_FILE = ".executor_status"


class DamagedFileError(Exception):
    """A status, info, lease or cache file that cannot be parsed; the message names the file."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path}: {problem}")
        self.path = path


def status_path(output_path: str) -> str:
    return fs.join(output_path, STATUS_FILE)


def parse_status(path: str, data: bytes) -> str | None:
    """The status a file's content says, None for an empty file."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise DamagedFileError(path, "status file is not UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    if len(lines) == 1 and not lines[0].startswith("{"):
        if lines[0] in STATUSES:
            return lines[0]
        raise DamagedFileError(path, f"unknown status {lines[0][:40]!r}; expected one of {', '.join(STATUSES)}")
    last: str | None = None
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            raise DamagedFileError(path, f"legacy status log has a line that is not JSON: {line[:40]!r}") from None
        status = event.get("status") if isinstance(event, dict) else None
        if isinstance(status, str):
            last = status
    if last not in STATUSES:
        raise DamagedFileError(path, "legacy status log names no known status")
    return last


def read_status(output_path: str) -> str | None:
    """The step's status; None if it has none. A damaged file raises ``DamagedFileError``.

    Statuses are overwritten in place (cheap on local disks), so a read racing a write can
    see a torn word: a file that does not parse is read again twice before it counts as damaged.
    """
    path = status_path(output_path)
    for attempt in range(3):
        data = fs.read_bytes(path)
        if data is None:
            return None
        try:
            return parse_status(path, data)
        except DamagedFileError:
            if attempt == 2:
                raise
            time.sleep(0.01)
    raise AssertionError("unreachable")


_WORDS = {status.encode(): status for status in STATUSES}


def read_local_statuses(output_paths: list[str]) -> dict[str, str | None]:
    """Statuses of steps under a local prefix: the plan's hot loop (a 10,000-step no-op reads 10,000).
    One open and one read per step, no Python file objects; anything but a bare word is read as ``read_status``
    reads it (legacy logs, a torn write)."""
    found: dict[str, str | None] = {}
    for output_path in output_paths:
        path = fs.local_path(output_path) + "/" + STATUS_FILE
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            found[output_path] = None
            continue
        try:
            data = os.read(fd, 16)
        finally:
            os.close(fd)
        word = _WORDS.get(data)
        found[output_path] = word if word is not None else read_status(output_path)
    return found


def write_status(output_path: str, status: str, *, replacing_running: bool = False) -> None:
    """``replacing_running``: this runner wrote RUNNING here, so the file exists (one system call fewer)."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    fs.write_in_place(status_path(output_path), status.encode(), exists=replacing_running)
