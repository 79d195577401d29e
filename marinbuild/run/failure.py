"""A failed step's traceback as text: the whole of it, its last frames, and where its Ray worker logged.
An exception back from a Ray task has no frames here: its cause, a ``RemoteTraceback``, holds the text Ray made
in the worker, and a note (``WORKER_LOG_NOTE``) names the worker's logs. No I/O (``store.traceback_file``)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass

WORKER_LOG_NOTE = "Ray worker log: "  # starts the note a step's Ray task (run.ray_task) adds to its exception

LAST_FRAMES = 2  # frames of a failure's traceback the console summary shows


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a Ray task, as text (chained as the exception's cause)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class FailureRecord:
    """What a failed step's error (``StepError``) carries once its failure is recorded."""

    traceback: str  # The full traceback, as ``traceback_text`` gives it.
    path: str | None
    """``.marinbuild_traceback.txt`` of the step, None if it was not written (the lease was lost, the store failed)."""


def traceback_text(exc: BaseException) -> str:
    """The full traceback of ``exc``: a recorded failure's (``FailureRecord``), the Ray worker's, or Python's."""
    record = getattr(exc, "failure", None)
    if isinstance(record, FailureRecord):
        return record.traceback
    cause = exc.__cause__
    if isinstance(cause, RemoteTraceback) and exc.__traceback__ is None:
        return cause.text
    return "".join(traceback.format_exception(exc)).rstrip("\n")


def worker_log_of(exc: BaseException | None) -> str | None:
    """The Ray worker log a step's task named on ``exc`` (or on the exception it wraps), None if none."""
    seen = 0
    while exc is not None and seen < 8:
        for note in getattr(exc, "__notes__", None) or ():
            if isinstance(note, str) and note.startswith(WORKER_LOG_NOTE):
                return note[len(WORKER_LOG_NOTE) :]
        exc, seen = exc.__cause__, seen + 1
    return None


def last_frames(text: str, frames: int = LAST_FRAMES) -> list[str]:
    """The last ``frames`` frames of the last traceback in ``text`` (``File`` and source lines, no ``^^^`` lines)."""
    lines = text.rstrip("\n").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith('  File "')]
    if not starts:
        return []
    end = starts[-1] + 1
    while end < len(lines) and lines[end].startswith("    "):
        end += 1
    return [line for line in lines[starts[max(len(starts) - frames, 0)] : end] if line.strip(" ^~")]


def traceback_file_of(exc: BaseException | None) -> str | None:
    """The ``.marinbuild_traceback.txt`` a recorded failure (``StepError``) was written to, else None."""
    return getattr(getattr(exc, "failure", None), "path", None)
