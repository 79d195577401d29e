"""The build listeners: progress display, summary, build-event JSON lines, Chrome trace."""

from __future__ import annotations

import io
import json
import os
import random
import re
import sys
import threading
from pathlib import Path
from typing import Any

import pipelines as pl
import pytest
from rich.console import Console

from marinbuild.executor import Executor, StepFailedError
from marinbuild.run import events as ev
from marinbuild.run.step_job import StepError
from marinbuild.ui.bep import BuildEventJsonWriter
from marinbuild.ui.progress import ProgressDisplay
from marinbuild.ui.summary import BuildSummary
from marinbuild.ui.trace import ChromeTraceWriter

N_THREADS = 8


def path_of(name: str) -> str:
    return f"/prefix/{name}-abc123"


def emit_build(bus: ev.EventBus, names: list[str], built_before: list[str] = ()) -> None:
    """A build where each of ``names`` runs in its own thread and succeeds."""
    for name in built_before:
        bus.emit(
            ev.PLANNED,
            step=name,
            output_path=path_of(name),
            detail="built",
            data={"dry_run": False, "status": "SUCCESS"},
        )
    for name in names:
        bus.emit(
            ev.PLANNED, step=name, output_path=path_of(name), detail="missing", data={"dry_run": False, "status": None}
        )
    bus.emit(ev.BUILD_STARTED, data={"steps": len(names)})
    barrier = threading.Barrier(min(len(names), N_THREADS))

    def work(chunk: list[str]) -> None:
        barrier.wait()
        for name in chunk:
            bus.emit(ev.STARTED, step=name, output_path=path_of(name))
            bus.emit(ev.SUCCEEDED, step=name, output_path=path_of(name))

    chunks = [names[i::N_THREADS] for i in range(min(len(names), N_THREADS))]
    threads = [threading.Thread(target=work, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bus.emit(ev.BUILD_FINISHED, data={"ran": len(names), "failed": 0})


def emit_failing_build(bus: ev.EventBus) -> None:
    """ok succeeds, x fails (wrapped like the engine wraps it), y depends on x, z is skipped, w waits then is cached."""
    for name in ("ok", "x", "y", "z", "w"):
        bus.emit(
            ev.PLANNED, step=name, output_path=path_of(name), detail="missing", data={"dry_run": False, "status": None}
        )
    bus.emit(ev.BUILD_STARTED, data={"steps": 5})
    bus.emit(ev.STARTED, step="ok", output_path=path_of("ok"))
    bus.emit(ev.STARTED, step="x", output_path=path_of("x"))
    bus.emit(ev.WAITING, step="w", output_path=path_of("w"), detail="lease held by host-1")
    bus.emit(ev.SUCCEEDED, step="ok", output_path=path_of("ok"))
    try:
        try:
            raise RuntimeError("boom")
        except RuntimeError as exc:
            raise StepError("x: RuntimeError: boom") from exc
    except StepError as exc:
        error = exc
    bus.emit(ev.FAILED, step="x", output_path=path_of("x"), error=error)
    bus.emit(ev.DEP_FAILED, step="y", output_path=path_of("y"), detail="dependency x failed")
    bus.emit(ev.CACHED, step="w", output_path=path_of("w"), detail="built by another runner")
    bus.emit(ev.SKIPPED, step="z", output_path=path_of("z"), detail="not started: the build stopped after a failure")
    bus.emit(ev.BUILD_FINISHED, data={"ran": 1, "failed": 1})


# -- progress, plain lines ---------------------------------------------------------------------


def test_plain_progress_one_line_per_event_from_many_threads():
    out = io.StringIO()
    display = ProgressDisplay(out, is_tty=False)
    names = [f"pkg/step{i:02d}" for i in range(40)]
    emit_build(ev.EventBus([display]), names, built_before=["pkg/old"])
    display.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "building: 40 steps to run, 1 already built"
    built = [line for line in lines if " built " in line and line.startswith("[")]
    assert len(built) == 40
    counters = []
    for line in built:
        m = re.fullmatch(r"\[(\d+)/40\] built (pkg/step\d\d) \(\d+\.\ds\)", line)
        assert m, line
        counters.append(int(m.group(1)))
    assert counters == list(range(1, 41))  # no line lost or interleaved; counts in order
    assert {line.split()[2] for line in built} == set(names)
    started = [line for line in lines if line.startswith("started ")]
    assert sorted(started) == sorted(f"started {n} ({path_of(n)})" for n in names)
    assert lines[-1].startswith("[40/40] built "), lines[-1]
    assert not any(line.startswith("build finished") for line in lines)  # the summary says it, once


def test_plain_progress_failures_waiting_and_not_run():
    out = io.StringIO()
    display = ProgressDisplay(out, is_tty=False)
    emit_failing_build(ev.EventBus([display]))
    text = out.getvalue()
    assert "waiting for w: lease held by host-1\n" in text
    assert re.search(r"^\[1/5\] built ok \(\d+\.\ds\)$", text, re.M)
    assert "[2/5] FAILED x: RuntimeError: boom\n" in text
    assert "[3/5] not running y: dependency x failed\n" in text
    assert "[4/5] cached w: built by another runner\n" in text
    assert "[5/5] skipped z (not started: the build stopped after a failure)\n" in text
    assert "build finished" not in text  # the summary says it, once
    display.close()
    display(ev.Event(ev.STARTED, step="late"))  # ignored after close
    assert "late" not in out.getvalue()


def test_plain_progress_dry_run_and_other_errors():
    out = io.StringIO()
    display = ProgressDisplay(out, is_tty=False)
    display(ev.Event(ev.PLANNED, step="a", output_path="/p/a-1", detail="missing", data={"dry_run": True}))
    display(ev.Event(ev.FAILED, step="b", error=ValueError("bad value")))
    display(ev.Event(ev.FAILED, step="c", error=KeyError("k")))
    lines = out.getvalue().splitlines()
    assert lines[0] == "[dry run] a: missing (/p/a-1)"
    assert lines[1] == "[1/1] FAILED b: ValueError: bad value"
    assert lines[2] == "[2/1] FAILED c: KeyError: 'k'"


def test_is_tty_defaults_to_the_file():
    assert ProgressDisplay(io.StringIO()).is_tty is False


# -- progress, live display --------------------------------------------------------------------


def render_text(renderable: Any) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, width=120, color_system=None)
    console.print(renderable)
    return console.file.getvalue()


def test_live_display_shows_running_steps_and_prints_finished_ones():
    screen = io.StringIO()
    display = ProgressDisplay(console=Console(file=screen, force_terminal=True, width=120))
    assert display.is_tty
    bus = ev.EventBus([display])
    names = [f"train/model-{i}" for i in range(5)]
    for name in names:
        bus.emit(ev.PLANNED, step=name, output_path=path_of(name), detail="missing", data={"dry_run": False})
    bus.emit(ev.BUILD_STARTED, data={"steps": 5})
    threads = [
        threading.Thread(target=bus.emit, args=(ev.STARTED,), kwargs={"step": n, "output_path": path_of(n)})
        for n in names
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bus.emit(ev.WAITING, step="shared/root", output_path=path_of("shared/root"), detail="lease held by host-9")
    frame = render_text(display.renderable())
    for name in names:
        assert name in frame
    assert "0/5" in frame and "Building" in frame
    assert "shared/root" in frame and "lease held by host-9" in frame

    bus.emit(ev.SUCCEEDED, step=names[0], output_path=path_of(names[0]))
    frame = render_text(display.renderable())
    assert names[0] not in frame and names[1] in frame and "1/5" in frame
    display.close()  # stops the live region; its last frame stays
    assert type(sys.stdout).__name__ != "FileProxy" and type(sys.stderr).__name__ != "FileProxy"  # restored
    written = screen.getvalue()
    assert f"built {names[0]}" in written
    for name in names[1:]:
        assert name in written


def test_live_display_finishes_on_build_finished():
    screen = io.StringIO()
    display = ProgressDisplay(console=Console(file=screen, force_terminal=True, width=120))
    emit_failing_build(ev.EventBus([display]))
    assert type(sys.stdout).__name__ != "FileProxy"  # the live region stopped on build_finished: stdout is back
    frame = render_text(display.renderable())
    assert "Build finished" in frame and "5/5" in frame and "1 failed" in frame
    written = screen.getvalue()
    assert "FAILED x: RuntimeError: boom" in written
    assert "not running y: dependency x failed" in written
    display.close()


# -- summary -----------------------------------------------------------------------------------


def test_summary_counts_render_and_dict():
    summary = BuildSummary()
    bus = ev.EventBus([summary])
    bus.emit(ev.PLANNED, step="old", output_path=path_of("old"), detail="built", data={"dry_run": False})
    emit_failing_build(bus)
    assert summary.counts == {"built": 1, "cached": 2, "failed": 1, "dep_failed": 1, "skipped": 1}
    requested = [
        ("//pkg:ok", path_of("ok")),
        ("//pkg:yy", path_of("y")),
        ("//pkg:old", path_of("old")),
        ("//other:x", path_of("x")),
    ]
    text = summary.render(requested)
    lines = text.splitlines()
    assert re.fullmatch(
        r"Build FAILED in \d+\.\ds: 1 built, 2 cached, 1 failed, 1 dependency failed, 1 skipped", lines[0]
    )
    assert "  FAILED x: RuntimeError: boom" in lines
    assert "  not run: y (dependency x failed)" in lines
    assert "  skipped: z (not started: the build stopped after a failure)" in lines
    assert f"//pkg:ok   ->  {path_of('ok')}" in lines
    assert f"//pkg:old  ->  {path_of('old')}" in lines
    assert f"//pkg:yy   ->  {path_of('y')}  (not built: dependency failed)" in lines
    assert f"//other:x  ->  {path_of('x')}  (failed)" in lines

    d = summary.as_dict(requested)
    assert json.loads(json.dumps(d)) == d
    assert d["status"] == "failed"
    assert d["counts"] == summary.counts
    (failure,) = d["failures"]
    traceback = failure.pop("traceback")
    assert failure == {
        "step": "x",
        "output_path": path_of("x"),
        "error": "RuntimeError: boom",
        "error_full": "StepError: x: RuntimeError: boom",
        "traceback_file": None,
        "worker_log": None,
    }
    assert 'raise RuntimeError("boom")' in traceback and traceback.endswith("StepError: x: RuntimeError: boom")
    assert d["dep_failed"] == [{"step": "y", "output_path": path_of("y"), "detail": "dependency x failed"}]
    assert [s["step"] for s in d["skipped"]] == ["z"]
    assert [t["status"] for t in d["targets"]] == ["built", "dep_failed", "built", "failed"]
    assert d["elapsed"] is not None and d["elapsed"] >= 0
    assert d["planned"] == {"built": 1, "missing": 5}


def test_summary_of_a_clean_build_from_threads():
    summary = BuildSummary()
    names = [f"s{i}" for i in range(50)]
    emit_build(ev.EventBus([summary]), names, built_before=["a", "b"])
    assert summary.counts == {"built": 50, "cached": 2, "failed": 0, "dep_failed": 0, "skipped": 0}
    text = summary.render([("//p:s1", path_of("s1"))])
    assert re.fullmatch(rf"Build OK in \d+\.\ds: 50 built, 2 cached\n//p:s1  ->  {re.escape(path_of('s1'))}", text)
    assert summary.as_dict()["status"] == "ok" and "targets" not in summary.as_dict()


def test_summary_dry_run_and_interrupted():
    summary = BuildSummary()
    for name, state in (("a", "built"), ("b", "missing"), ("c", "missing"), ("d", "abandoned")):
        summary(ev.Event(ev.PLANNED, step=name, output_path=path_of(name), detail=state, data={"dry_run": True}))
    text = summary.render([("//p:a", path_of("a")), ("//p:b", path_of("b"))])
    assert text.splitlines() == [
        "Dry run: 3 steps to run (1 abandoned, 2 missing), 1 already built",
        f"//p:a  ->  {path_of('a')}",
        f"//p:b  ->  {path_of('b')}  (would run: missing)",
    ]
    assert summary.as_dict()["status"] == "dry_run"

    interrupted = BuildSummary()
    interrupted(ev.Event(ev.BUILD_STARTED, data={"steps": 1}))
    interrupted(ev.Event(ev.STARTED, step="b", output_path=path_of("b")))
    assert interrupted.render([("//p:b", path_of("b"))]).splitlines() == [
        "Build INTERRUPTED: 0 built, 0 cached",
        f"//p:b  ->  {path_of('b')}  (not built)",
    ]


# -- build event JSON lines --------------------------------------------------------------------

FIELDS = {"kind", "step", "output_path", "detail", "time", "error", "traceback", "traceback_file", "data"}


def test_bep_writes_every_event_as_a_json_line(tmp_path):
    path = tmp_path / "logs" / "events.jsonl"
    writer = BuildEventJsonWriter(path)
    bus = ev.EventBus([writer])
    names = [f"n{i}" for i in range(30)]
    emit_build(bus, names)
    emit_failing_build(bus)
    bus.emit(ev.PLANNED, step="odd", detail="missing", data={"path": Path("/x"), "obj": object()})
    records = [json.loads(line) for line in path.read_text().splitlines()]  # flushed before close
    writer.close()
    writer(ev.Event(ev.STARTED, step="late"))  # ignored after close
    assert len(path.read_text().splitlines()) == len(records) == 30 * 3 + 2 + 5 + 10 + 1
    for record in records:
        assert set(record) == FIELDS
        assert isinstance(record["time"], float) and isinstance(record["data"], dict)
        assert record["error"] is None or isinstance(record["error"], str)
    assert sorted(r["step"] for r in records if r["kind"] == "succeeded") == sorted(names + ["ok"])
    failed = [r for r in records if r["kind"] == "failed"]
    assert failed == [
        {
            **failed[0],
            "step": "x",
            "output_path": path_of("x"),
            "error": "StepError: x: RuntimeError: boom",
            "traceback_file": None,
        }
    ]
    assert 'raise RuntimeError("boom")' in failed[0]["traceback"]
    assert all(r["traceback"] is None for r in records if r["kind"] != "failed")
    assert records[-1]["data"]["path"] == "/x"


# -- Chrome trace ------------------------------------------------------------------------------


def load_trace(path: Path) -> dict[str, Any]:
    trace = json.loads(path.read_text())
    assert set(trace) == {"traceEvents", "displayTimeUnit"} and trace["displayTimeUnit"] == "ms"
    for e in trace["traceEvents"]:
        assert {"name", "ph", "pid", "tid"} <= set(e)
        assert e["pid"] == 1 and isinstance(e["tid"], int)
        if e["ph"] == "X":
            assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float))
            assert e["ts"] >= 0 and e["dur"] >= 0
        if e["ph"] == "i":
            assert isinstance(e["ts"], (int, float)) and e["s"] == "t"
    return trace


def assert_lanes_never_overlap(events: list[dict[str, Any]]) -> None:
    by_lane: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_lane.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_lane.values():
        spans.sort()
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            assert start >= end - 1e-3  # microsecond rounding


def step_events(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]


def test_trace_from_threads(tmp_path):
    path = tmp_path / "trace.json"
    writer = ChromeTraceWriter(path)
    names = [f"t{i}" for i in range(64)]
    emit_build(ev.EventBus([writer]), names)
    writer.close()
    trace = load_trace(path)
    steps = step_events(trace)
    assert sorted(e["name"] for e in steps) == sorted(names)
    for e in steps:
        assert e["args"] == {"output_path": path_of(e["name"]), "outcome": "succeeded"}
        assert 1 <= e["tid"] <= len(names)
    assert max(e["tid"] for e in steps) <= N_THREADS  # a lane per concurrent slot, not per thread or step
    assert_lanes_never_overlap(trace["traceEvents"])
    builds = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "build"]
    assert len(builds) == 1 and builds[0]["tid"] == 0
    names_meta = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names_meta[0] == "build" and names_meta[1] == "slot 1"


def test_trace_lanes_with_synthetic_times(tmp_path):
    """Random overlapping intervals (fed in time order): lanes reuse free slots and never overlap."""
    rng = random.Random(7)
    intervals = []
    for i in range(200):
        start = rng.uniform(0, 100)
        intervals.append((f"s{i}", start, start + rng.uniform(0, 10)))
    stream = [(start, 0, ev.STARTED, name) for name, start, _ in intervals]
    stream += [(end, 1, rng.choice([ev.SUCCEEDED, ev.FAILED, ev.CACHED]), name) for name, _, end in intervals]
    stream.sort()
    path = tmp_path / "t.json"
    writer = ChromeTraceWriter(path)
    t0 = 1_700_000_000.0
    for t, _, kind, name in stream:
        writer(
            ev.Event(
                kind,
                step=name,
                output_path=path_of(name),
                time=t0 + t,
                error=RuntimeError("x") if kind == ev.FAILED else None,
            )
        )
    writer.close()
    trace = load_trace(path)
    steps = step_events(trace)
    assert len(steps) == 200
    assert_lanes_never_overlap(steps)
    max_concurrent = max(sum(1 for _, s, e in intervals if s <= t < e) for _, t, _ in intervals)
    assert max(e["tid"] for e in steps) == max_concurrent  # lowest free lane: as many lanes as needed, no more
    outcomes = {e["args"]["outcome"] for e in steps}
    assert outcomes <= {"succeeded", "failed", "cached"}
    by_name = {e["name"]: e for e in steps}
    for name, start, end in intervals:
        assert by_name[name]["ts"] == pytest.approx((start - min(s for _, s, _ in intervals)) * 1e6, abs=1)
        assert by_name[name]["dur"] == pytest.approx((end - start) * 1e6, abs=1)


def test_trace_waiting_spans_and_unfinished_steps(tmp_path):
    path = tmp_path / "t.json"
    writer = ChromeTraceWriter(path)
    t0 = 1000.0
    events = [
        ev.Event(ev.BUILD_STARTED, time=t0, data={"steps": 3}),
        ev.Event(ev.WAITING, step="w", output_path="/w", detail="lease held by host-1", time=t0 + 1),
        ev.Event(ev.STARTED, step="a", output_path="/a", time=t0 + 1.5),
        ev.Event(ev.CACHED, step="w", output_path="/w", detail="built by another runner", time=t0 + 3),
        ev.Event(ev.WAITING, step="v", output_path="/v", detail="lease held by host-2", time=t0 + 3.5),
        ev.Event(ev.STARTED, step="v", output_path="/v", time=t0 + 4),  # took the stale lease over
    ]
    for e in events:
        writer(e)
    writer.close()  # interrupted: a and v never finished, no build_finished
    writer(ev.Event(ev.SUCCEEDED, step="a", output_path="/a", time=t0 + 9))  # ignored after close
    trace = load_trace(path)
    xs = {(e["cat"], e["name"]): e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert xs[("wait", "w")]["args"]["outcome"] == "cached"
    assert xs[("wait", "w")]["ts"] == 1e6 and xs[("wait", "w")]["dur"] == 2e6
    assert xs[("wait", "v")]["args"]["outcome"] == "lease acquired"
    assert xs[("step", "v")]["tid"] == xs[("wait", "v")]["tid"]
    assert xs[("step", "v")]["args"]["outcome"] == "unfinished" and xs[("step", "v")]["dur"] == 0
    assert xs[("step", "a")]["args"]["outcome"] == "unfinished" and xs[("step", "a")]["dur"] == 2.5e6
    assert xs[("build", "build")]["args"] == {"outcome": "unfinished"}
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert [e["name"] for e in instants] == ["waiting: w", "waiting: v"]
    assert instants[0]["args"]["detail"] == "lease held by host-1"
    assert_lanes_never_overlap(trace["traceEvents"])


# -- with the real executor --------------------------------------------------------------------


def test_listeners_on_a_real_build(prefix, tmp_path):
    out = io.StringIO()
    display = ProgressDisplay(out, is_tty=False)
    summary = BuildSummary()
    bep = BuildEventJsonWriter(tmp_path / "events.jsonl")
    trace = ChromeTraceWriter(tmp_path / "trace.json")
    a = pl.step("ui/a", "hello")
    b = pl.step("ui/b", "world", inputs=[a])
    bad = pl.step("ui/bad", fn=pl.fail_always)
    after_bad = pl.step("ui/after", inputs=[bad])
    ex = Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        listeners=[display, summary, bep, trace],
    )
    with pytest.raises(StepFailedError):
        ex.run([b, after_bad])
    for listener in (display, bep, trace):
        listener.close()
    text = out.getvalue()
    assert "building: 4 steps to run" in text
    assert re.search(r"^\[\d/4\] built ui/b \(\d+\.\ds\)$", text, re.M)
    assert re.search(r"^\[\d/4\] FAILED ui/bad: RuntimeError: boom in ", text, re.M)
    assert re.search(r"^\[\d/4\] not running ui/after: dependency ui/bad failed$", text, re.M)
    assert summary.counts == {"built": 2, "cached": 0, "failed": 1, "dep_failed": 1, "skipped": 0}
    rendered = summary.render([("//ui:b", ex.output_paths[b])])
    assert f"//ui:b  ->  {ex.output_paths[b]}" in rendered.splitlines()
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert (
        kinds[:4] == [ev.PLANNED] * 4 and kinds[4] == ev.BUILD_STARTED and kinds[-2:] == [ev.BUILD_FINISHED, ev.COMPUTE]
    )
    steps = step_events(load_trace(tmp_path / "trace.json"))
    assert {e["name"]: e["args"]["outcome"] for e in steps} == {
        "ui/a": "succeeded",
        "ui/b": "succeeded",
        "ui/bad": "failed",
    }


def test_log_listener_lines(caplog):
    """The Python API's log lines: one per started, built, waiting, failed or skipped step, at their levels."""
    caplog.set_level("DEBUG", logger="marinbuild")
    ev.log_listener(ev.Event(ev.STARTED, step="a", output_path="/p/a-1"))
    ev.log_listener(ev.Event(ev.SUCCEEDED, step="a"))
    ev.log_listener(ev.Event(ev.FAILED, step="b", error=ValueError("bad")))
    ev.log_listener(ev.Event(ev.DEP_FAILED, step="c", detail="b failed"))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "running a -> /p/a-1"),
        ("INFO", "built a"),
        ("ERROR", "FAILED b: bad"),
        ("WARNING", "not running c: b failed"),
    ]
    assert {r.name for r in caplog.records} == {"marinbuild"}
