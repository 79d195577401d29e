"""The ``.executor_status`` file: one word (RUNNING, SUCCESS, FAILED, DEP_FAILED).

Writes the one-word form Marin writes today; reads Marin's legacy JSON-lines event log too. A file that is neither is an
error naming the file, never a silent state."""

from __future__ import annotations

import errno
import json
import os

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
    """The step's status, or None; an unparsable one (``DamagedFileError``) was written by something else."""
    path = status_path(output_path)
    data = fs.read_bytes(path)
    return None if data is None else parse_status(path, data)


def write_status(output_path: str, status: str) -> None:
    """Replace the status atomically: a reader (Marin's too) sees the old word or the new one, never a mix."""
    if status not in STATUSES:
        raise ValueError(f"unknown status {status!r}")
    fs.write_atomic(status_path(output_path), status.encode())


def write_status_on_full_disk(output_path: str, status: str) -> None:
    """``write_status`` when the disk may be full: if the atomic write fails for want of space (a temporary file
    needs a new block), overwrite the existing status in place with one ``pwrite`` of the same length, the word
    padded with newlines (readers strip lines; ``FAILED`` + newline is as long as ``RUNNING``). One small write
    into a block the file already has: it needs no space and a kill cannot split it."""
    try:
        write_status(output_path, status)
        return
    except OSError as exc:
        if not fs.is_local(output_path) or exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            raise
        error = exc
    path = fs.local_path(status_path(output_path))
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        raise error from None
    try:
        size = os.fstat(fd).st_size
        word = status.encode()
        if size < len(word):
            raise error
        os.pwrite(fd, word + b"\n" * (size - len(word)), 0)
    finally:
        os.close(fd)
