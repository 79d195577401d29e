"""``.marinbuild_traceback.txt``: the full traceback of a step's last failure, beside its ``.executor_status``.

Contract:
- Written by the runner that records the failure, under the step's lease, *before* it writes FAILED: a
  reader that sees FAILED finds the traceback of that failure (a rerun that fails again replaces it).
- Removed at commit, before SUCCESS (the commit's listing of the folder tells whether it is there, so a
  step that never failed costs no request): a SUCCESS output never carries a stale traceback.
- A ``.marinbuild*`` name: not an output (left out of manifests, so ``cache verify`` never counts it), and
  nothing Marin reads. ``cache gc`` removes it with its step's folder.
- Plain UTF-8 text, as Python prints a traceback (on Ray: as Ray prints the task's, with the worker's log
  named in a last line); any fsspec prefix (local folder, ``gs://``).
"""

from __future__ import annotations

from marinbuild.store import fs

TRACEBACK_FILE = ".marinbuild_traceback.txt"


def traceback_path(output_path: str) -> str:
    return fs.join(output_path, TRACEBACK_FILE)


def write_traceback(output_path: str, text: str) -> str:
    """Write the step's traceback; its path."""
    path = traceback_path(output_path)
    fs.write_atomic(path, text.rstrip("\n").encode("utf-8", "replace") + b"\n")
    return path


def existing_traceback(output_path: str) -> str | None:
    """The traceback file's path if the step has one (one stat or request), else None."""
    path = traceback_path(output_path)
    return path if fs.exists(path) else None


def remove_traceback(output_path: str) -> None:
    fs.remove(traceback_path(output_path))
