"""The errors a run raises: Marin's names and base classes, so code that catches Marin's keeps working.
``StepFailedError`` after the schedule ends with failures; ``PreviousTaskFailedError`` before anything runs,
when a needed step failed in an earlier run and ``force_run_failed`` is False."""

from __future__ import annotations

from marinbuild.run.failure import traceback_file_of


class StepFailedError(RuntimeError):
    """Steps failed: ``failures`` maps names to exceptions; the message names their traceback files."""

    def __init__(self, failures: dict[str, BaseException], dep_failed: list[str]):
        paths = {name: traceback_file_of(error) for name, error in failures.items()}
        names = ", ".join(f"{name} (traceback: {path})" if path else name for name, path in paths.items())
        message = f"{len(failures)} step(s) failed: {names}"
        if dep_failed:
            message += f"; {len(dep_failed)} step(s) not run because a dependency failed (DEP_FAILED): "
            message += ", ".join(dep_failed)
        super().__init__(message)
        self.failures = failures
        self.dep_failed = dep_failed


class PreviousTaskFailedError(Exception):
    """A needed step failed before and ``force_run_failed`` is False (Marin's name and ``Exception`` base, Marin's
    advice); ``failed`` names each step (status, traceback file), for a face with its own spelling."""

    def __init__(self, message: str, failed: list[str] | None = None):
        super().__init__(message)
        self.failed = list(failed or [])


PreviousStepFailedError = PreviousTaskFailedError  # marinbuild's earlier name
