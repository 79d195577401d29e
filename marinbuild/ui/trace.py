"""A Chrome trace of the build, for Perfetto (ui.perfetto.dev) or chrome://tracing.

``ChromeTraceWriter(path)`` is an event listener. Each step that ran is a complete event (``"ph": "X"``) from
``started`` to its end; a step that waited for another runner a ``wait`` span. A span takes the lowest lane (``tid``)
free at its start, so a lane is one concurrent slot; ``tid`` 0 is the build. Times are microseconds from the first
event; nothing is written until ``close()``."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marinbuild.run import events as ev

PID = 1
BUILD_LANE = 0

_ENDS = {ev.SUCCEEDED: "succeeded", ev.FAILED: "failed", ev.CACHED: "cached"}


@dataclass
class _Span:
    name: str
    output_path: str | None
    start: float
    lane: int
    cat: str  # "step" (ran here) or "wait" (waited for another runner)


class ChromeTraceWriter:
    """Listener collecting a Chrome trace of the build; ``close()`` writes it to ``path``."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._events: list[dict[str, Any]] = []
        self._open: dict[tuple[str | None, str | None], _Span] = {}
        self._lane_free_at: list[float] = []  # lane i+1 -> end time of its last span (inf while busy)
        self._origin: float | None = None
        self._last: float = 0.0
        self._build_start: float | None = None
        self._closed = False

    def __call__(self, event: ev.Event) -> None:
        with self._lock:
            if self._closed:
                return
            self._origin = event.time if self._origin is None else min(self._origin, event.time)
            self._last = max(self._last, event.time)
            self._update(event)

    def _update(self, event: ev.Event) -> None:
        key = (event.step, event.output_path)
        if event.kind == ev.BUILD_STARTED:
            self._build_start = event.time
        elif event.kind == ev.BUILD_FINISHED and self._build_start is not None:
            self._events.append(
                _complete_event("build", "build", BUILD_LANE, self._build_start, event.time, dict(event.data))
            )
            self._build_start = None
        elif event.kind == ev.WAITING:
            span = self._open.get(key)
            if span is None:
                span = self._open[key] = _Span(
                    event.step or "?", event.output_path, event.time, self._take_lane(event.time), "wait"
                )
            self._events.append(
                {
                    "name": f"waiting: {span.name}",
                    "cat": "wait",
                    "ph": "i",
                    "s": "t",
                    "pid": PID,
                    "tid": span.lane,
                    "ts": event.time,
                    "args": {"output_path": event.output_path, "detail": event.detail},
                }
            )
        elif event.kind == ev.STARTED:
            span = self._open.pop(key, None)
            if span is not None:  # it waited, then took the lease over: the wait ends, the step starts on its lane
                self._complete(span, event.time, "lease acquired")
                lane = span.lane
                self._lane_free_at[lane - 1] = float("inf")
            else:
                lane = self._take_lane(event.time)
            self._open[key] = _Span(event.step or "?", event.output_path, event.time, lane, "step")
        elif event.kind in _ENDS:
            span = self._open.pop(key, None)
            if span is not None:
                self._complete(span, event.time, _ENDS[event.kind])

    def _take_lane(self, start: float) -> int:
        for i, free_at in enumerate(self._lane_free_at):
            if free_at <= start:
                self._lane_free_at[i] = float("inf")
                return i + 1
        self._lane_free_at.append(float("inf"))
        return len(self._lane_free_at)

    def _complete(self, span: _Span, end: float, outcome: str) -> None:
        self._lane_free_at[span.lane - 1] = max(end, span.start)
        self._events.append(self._span_event(span, end, outcome))

    def _span_event(self, span: _Span, end: float, outcome: str) -> dict[str, Any]:
        args = {"output_path": span.output_path, "outcome": outcome}
        return _complete_event(span.name, span.cat, span.lane, span.start, end, args)

    def trace(self) -> dict[str, Any]:
        """The trace so far; spans still open (an interrupted build) end at the last event, outcome ``unfinished``."""
        with self._lock:
            events = list(self._events)
            for span in sorted(self._open.values(), key=lambda s: s.start):
                events.append(self._span_event(span, self._last, "unfinished"))
            if self._build_start is not None:
                args = {"outcome": "unfinished"}
                events.append(_complete_event("build", "build", BUILD_LANE, self._build_start, self._last, args))
        origin = self._origin or 0.0
        events = [{**e, "ts": round((e["ts"] - origin) * 1e6, 3)} for e in events]  # collected in seconds
        lanes = max((e["tid"] for e in events), default=BUILD_LANE)
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "marinbuild"}},
            {"name": "thread_name", "ph": "M", "pid": PID, "tid": BUILD_LANE, "args": {"name": "build"}},
        ]
        for lane in range(1, lanes + 1):
            meta.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": lane, "args": {"name": f"slot {lane}"}})
            meta.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": lane, "args": {"sort_index": lane}})
        return {"traceEvents": meta + events, "displayTimeUnit": "ms"}

    def close(self) -> None:
        """Write the trace to ``path`` (parent folders made); later events are ignored."""
        if self._closed:
            return
        trace = self.trace()
        with self._lock:
            self._closed = True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(trace, default=str), encoding="utf-8")
        tmp.replace(self.path)


def _complete_event(name: str, cat: str, tid: int, start: float, end: float, args: dict[str, Any]) -> dict[str, Any]:
    dur = round(max(end - start, 0.0) * 1e6, 3)
    return {"name": name, "cat": cat, "ph": "X", "pid": PID, "tid": tid, "ts": start, "dur": dur, "args": args}
