"""``.marinbuild_traceback.txt``: the full traceback of a step's last failure, beside its ``.executor_status``.

Written atomically under the step's lease before FAILED, so a reader seeing FAILED finds that failure's traceback;
removed at commit before SUCCESS. A ``.marinbuild*`` name: not an output, nothing Marin reads."""

from __future__ import annotations

from marinbuild.store import fs

TRACEBACK_FILE = ".marinbuild_traceback.txt"


def traceback_path(output_path: str) -> str:
    return fs.join(output_path, TRACEBACK_FILE)


def write_traceback(output_path: str, text: str) -> str:
    path = traceback_path(output_path)
    fs.write_atomic(path, text.rstrip("\n").encode("utf-8", "replace") + b"\n")
    return path


def existing_traceback(output_path: str) -> str | None:
    """The traceback file's path if the step has one (one stat or request), else None."""
    path = traceback_path(output_path)
    return path if fs.exists(path) else None


def remove_traceback(output_path: str) -> None:
    fs.remove(traceback_path(output_path))
