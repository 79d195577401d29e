"""The end-of-build summary: what was built, what was already there, what failed, where outputs are.

``BuildSummary`` is an event listener counting outcomes, recording failures and the ``compute`` event (the headline
ends with what the build reused and spent); ``render(requested)`` gives the text the
CLI prints after the build (under each failure its traceback's last frames, its traceback file and, on Ray, the worker's
log); ``as_dict()`` the same facts for ``--output json``."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from marinbuild.run import events as ev
from marinbuild.run.failure import last_frames, traceback_file_of, traceback_text, worker_log_of
from marinbuild.ui._text import describe_error, error_text, format_duration

MAX_LISTED = 20  # Dependency-failed / skipped steps listed by name in ``render``; the rest are counted.


_NOTES = {
    "built": "",
    "dep_failed": "not built: dependency failed",
    "skipped": "not built: skipped",
    "failed before": "not built: failed before",
}
_PLANNED_WORDS = {"built": "already built", "failed": "failed before"}  # a refused build's headline


@dataclass(frozen=True)
class StepProblem:
    """A step not run (``message``: why) or failed, with its error, traceback, traceback file and Ray worker logs."""

    step: str
    output_path: str | None
    message: str
    full_error: str | None = None
    traceback: str | None = None
    traceback_file: str | None = None
    worker_log: str | None = None


class BuildSummary:
    """Counts outcomes and records failures; ``cached``: steps built before the build or by another runner meanwhile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.built = 0
        self.cached = 0
        self.dry_run = False
        self.planned: dict[str, int] = {}  # plan state (built, missing, failed, ...) -> number of steps
        self.failures: list[StepProblem] = []
        self.dep_failed: list[StepProblem] = []
        self.skipped: list[StepProblem] = []
        self.started = False
        self.finished = False
        self.start_time: float | None = None
        self.end_time: float | None = None
        self._plan_state: dict[str, str] = {}
        self._done_paths: set[str] = set()
        self._outside_plan: dict[str, str] = {}
        self.compute: dict[str, Any] | None = None
        """What the build reused and spent (the ``compute`` event's data, ``run/compute.py``); then in words."""
        self.compute_text = ""

    def __call__(self, event: ev.Event) -> None:
        with self._lock:
            self._update(event)

    def _update(self, event: ev.Event) -> None:
        kind, step = event.kind, event.step or "?"
        if kind == ev.PLANNED:
            state = event.detail or "unknown"
            self.planned[state] = self.planned.get(state, 0) + 1
            self.dry_run = self.dry_run or bool(event.data.get("dry_run"))
            if event.output_path is not None:
                self._plan_state[event.output_path] = state
            if state == "built":
                self.cached += 1
                self._add_done(event)
        elif kind == ev.BUILD_STARTED:
            self.started, self.start_time = True, event.time
        elif kind == ev.BUILD_FINISHED:
            self.finished, self.end_time = True, event.time
        elif kind == ev.SUCCEEDED:
            self.built += 1
            self._add_done(event)
        elif kind == ev.CACHED:
            self.cached += 1
            self._add_done(event)
        elif kind == ev.FAILED:
            error = event.error
            text = traceback_text(error) if error is not None else None
            message, file, log = describe_error(event.step, error), traceback_file_of(error), worker_log_of(error)
            self.failures.append(StepProblem(step, event.output_path, message, error_text(error), text, file, log))
        elif kind == ev.DEP_FAILED:
            self.dep_failed.append(StepProblem(step, event.output_path, event.detail or "a dependency failed"))
        elif kind == ev.COMPUTE:
            self.compute, self.compute_text = event.data, event.detail or ""
        elif kind == ev.SKIPPED:
            self.skipped.append(StepProblem(step, event.output_path, event.detail or "not started"))

    def _add_done(self, event: ev.Event) -> None:
        if event.output_path is not None:
            self._done_paths.add(event.output_path)

    # -- results ------------------------------------------------------------------------------
    @property
    def counts(self) -> dict[str, int]:
        return {
            "built": self.built,
            "cached": self.cached,
            "failed": len(self.failures),
            "dep_failed": len(self.dep_failed),
            "skipped": len(self.skipped),
        }

    @property
    def ok(self) -> bool:
        return not self.failures and not self.dep_failed and not self.skipped

    @property
    def elapsed(self) -> float | None:
        return None if self.start_time is None or self.end_time is None else self.end_time - self.start_time

    def status(self) -> str:
        """``ok``, ``failed``, ``interrupted``, ``refused`` (failed before, not retried) or ``dry_run``."""
        if self.dry_run and not self.started:
            return "dry_run"
        if self.planned and not self.started:
            return "refused"
        if self.started and not self.finished:
            return "interrupted"
        return "ok" if self.ok else "failed"

    def outside_plan(self, states: dict[str, str]) -> None:
        """The state of requested outputs ``--run_only`` left out of the plan (its events say nothing of them)."""
        with self._lock:
            self._outside_plan.update(states)

    def _target_status(self, output_path: str) -> str:
        """``built``, ``failed``, ``dep_failed``, ``skipped``, ``not built``, ``failed before`` (a refused build), a
        state given by ``outside_plan``, or in a dry run ``would run: <state>``."""
        if output_path in self._outside_plan:
            return self._outside_plan[output_path]
        if self.dry_run and not self.started:
            state = self._plan_state.get(output_path)
            return "built" if state == "built" else f"would run: {state or 'unknown'}"
        if output_path in self._done_paths:
            return "built"
        if not self.started and self._plan_state.get(output_path) == "failed":
            return "failed before"
        for status, problems in (("failed", self.failures), ("dep_failed", self.dep_failed), ("skipped", self.skipped)):
            if any(p.output_path == output_path for p in problems):
                return status
        return "not built"

    def render(self, requested: list[tuple[str, str]]) -> str:
        """The summary block; ``requested`` is (label, output path) of each requested target."""
        with self._lock:
            lines = [self._headline()]
            for p in self.failures:
                lines.append(f"  FAILED {p.step}: {p.message}")
                lines.extend(f"    {line}" for line in last_frames(p.traceback or ""))
                if p.traceback_file:
                    lines.append(f"    full traceback: {p.traceback_file}")
                if p.worker_log:
                    lines.append(f"    Ray worker log: {p.worker_log}")
            for what, problems in (("not run", self.dep_failed), ("skipped", self.skipped)):
                for p in problems[:MAX_LISTED]:
                    lines.append(f"  {what}: {p.step} ({p.message})")
                if len(problems) > MAX_LISTED:
                    lines.append(f"  ... and {len(problems) - MAX_LISTED} more {what}")
            width = max((len(label) for label, _ in requested), default=0)
            for label, path in requested:
                note = _NOTES.get(status := self._target_status(path), status)
                lines.append(f"{label:<{width}}  ->  {path}" + (f"  ({note})" if note else ""))
        return "\n".join(lines)

    def _headline(self) -> str:
        status = self.status()
        if status == "dry_run":
            to_run = sum(n for state, n in self.planned.items() if state != "built")
            states = ", ".join(f"{n} {state}" for state, n in sorted(self.planned.items()) if state != "built")
            return (
                f"Dry run: {to_run} step{'s' if to_run != 1 else ''} to run"
                + (f" ({states})" if states else "")
                + f", {self.planned.get('built', 0)} already built"
            )
        if status == "refused":
            states = ", ".join(f"{n} {_PLANNED_WORDS.get(state, state)}" for state, n in sorted(self.planned.items()))
            return f"Build REFUSED, nothing ran: {states}"
        c = self.counts
        parts = [f"{c['built']} built", f"{c['cached']} cached"]
        for key, word in (("failed", "failed"), ("dep_failed", "dependency failed"), ("skipped", "skipped")):
            if c[key]:
                parts.append(f"{c[key]} {word}")
        word = {"ok": "Build OK", "failed": "Build FAILED", "interrupted": "Build INTERRUPTED"}[status]
        took = f" in {format_duration(self.elapsed)}" if self.elapsed is not None else ""
        return f"{word}{took}: " + ", ".join(parts) + (f"; {self.compute_text}" if self.compute_text else "")

    def as_dict(self, requested: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        """JSON-ready facts: status, counts, elapsed seconds, plan states, failures, steps not run, targets."""
        with self._lock:
            result: dict[str, Any] = {
                "status": self.status(),
                "counts": self.counts,
                "elapsed": self.elapsed,
                "dry_run": self.dry_run,
                "planned": dict(self.planned),
                "compute": self.compute,
                "failures": [
                    {
                        "step": p.step,
                        "output_path": p.output_path,
                        "error": p.message,
                        "error_full": p.full_error,
                        "traceback": p.traceback,
                        "traceback_file": p.traceback_file,
                        "worker_log": p.worker_log,
                    }
                    for p in self.failures
                ],
                "dep_failed": [
                    {"step": p.step, "output_path": p.output_path, "detail": p.message} for p in self.dep_failed
                ],
                "skipped": [{"step": p.step, "output_path": p.output_path, "detail": p.message} for p in self.skipped],
            }
            if requested is not None:
                result["targets"] = [
                    {"label": label, "output_path": path, "status": self._target_status(path)}
                    for label, path in requested
                ]
        return result
