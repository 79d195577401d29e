"""A running step's progress reports: ``progress`` events on the local backend, shown by the progress display."""

from __future__ import annotations

import io
import os
from typing import Any

from rich.console import Console

from marinbuild.executor import Executor, ExecutorStep, versioned
from marinbuild.run import events as ev
from marinbuild.run import step_progress
from marinbuild.ui.progress import ProgressDisplay


def test_report_without_a_reporter_says_nothing_listens():
    assert step_progress.report("1/2 shards") is False
    seen: list[tuple[str, dict[str, Any]]] = []
    with step_progress.reporting(lambda detail, data: seen.append((detail, data))):
        assert step_progress.report("1/2 shards", shards_done=1) is True
    assert seen == [("1/2 shards", {"shards_done": 1})]
    assert step_progress.report("2/2 shards") is False


def reporting_step(config: Any) -> None:
    for done in (1, 2):
        step_progress.report(f"{done}/2 parts", parts_done=done)


def test_a_local_step_reports_progress_events(tmp_path):
    events: list[ev.Event] = []
    ex = Executor(
        prefix=str(tmp_path),
        executor_info_base_path=os.path.join(str(tmp_path), "experiments"),
        listeners=[events.append],
    )
    ex.run([ExecutorStep(name="work/parts", fn=reporting_step, config={"n": versioned(2)})])
    progress = [e for e in events if e.kind == ev.PROGRESS]
    assert [(e.step, e.detail, e.data) for e in progress] == [
        ("work/parts", "1/2 parts", {"parts_done": 1}),
        ("work/parts", "2/2 parts", {"parts_done": 2}),
    ]
    assert progress[0].output_path == ex.output_paths[ex.steps[0]]


def test_the_display_shows_a_running_steps_progress():
    plain = io.StringIO()
    bus = ev.EventBus([ProgressDisplay(plain, is_tty=False)])
    bus.emit(ev.STARTED, step="pipe/tok", output_path="/p/tok-1")
    bus.emit(ev.PROGRESS, step="pipe/tok", output_path="/p/tok-1", detail="3/8 shards, 1,000 tokens/s")
    assert "pipe/tok: 3/8 shards, 1,000 tokens/s" in plain.getvalue()

    screen = io.StringIO()
    display = ProgressDisplay(console=Console(file=screen, force_terminal=True, width=120))
    bus = ev.EventBus([display])
    bus.emit(ev.BUILD_STARTED, data={"steps": 1})
    bus.emit(ev.STARTED, step="pipe/tok", output_path="/p/tok-1")
    bus.emit(ev.PROGRESS, step="pipe/tok", output_path="/p/tok-1", detail="3/8 shards, 1,000 tokens/s")
    console = Console(file=io.StringIO(), width=120)
    console.print(display.renderable())
    assert "3/8 shards, 1,000 tokens/s" in console.file.getvalue()
    display.close()


def test_off_a_terminal_progress_is_printed_when_it_changes_at_most_every_few_seconds():
    """A tokenize reports each second; a log gets a line only when the progress changed, at most every
    ``PROGRESS_LINE_EVERY`` seconds (never the same ``0/2 shards, 0 tokens/s`` twenty times)."""
    plain = io.StringIO()
    bus = ev.EventBus([ProgressDisplay(plain, is_tty=False)])
    bus.emit(ev.STARTED, step="pipe/tok", output_path="/p/tok-1", time=100.0)
    for second in range(20):
        bus.emit(
            ev.PROGRESS, step="pipe/tok", output_path="/p/tok-1", detail="0/2 shards, 0 tokens/s", time=100.0 + second
        )
    bus.emit(ev.PROGRESS, step="pipe/tok", output_path="/p/tok-1", detail="1/2 shards, 10 tokens/s", time=121.0)
    bus.emit(ev.PROGRESS, step="pipe/tok", output_path="/p/tok-1", detail="1/2 shards, 12 tokens/s", time=122.0)
    bus.emit(ev.PROGRESS, step="pipe/tok", output_path="/p/tok-1", detail="2/2 shards, 11 tokens/s", time=140.0)
    lines = [line for line in plain.getvalue().splitlines() if "shards" in line]
    assert lines == [
        "pipe/tok: 0/2 shards, 0 tokens/s",
        "pipe/tok: 1/2 shards, 10 tokens/s",
        "pipe/tok: 2/2 shards, 11 tokens/s",
    ]


def test_a_tokenize_without_a_display_logs_its_progress_only_when_it_changes(caplog, monkeypatch):
    """Where no display listens (a Ray task, a helper process), a tokenize logs its progress only when shards or
    tokens changed, at most every ``LOG_EVERY`` seconds; the first and last lines always."""
    from marinbuild.ml import tokenize

    now = [1000.0]
    monkeypatch.setattr(tokenize.time, "time", lambda: now[0])
    progress = tokenize._Progress(total=2)
    with caplog.at_level("INFO", logger=tokenize.logger.name):
        progress.report(force=True)
        for _ in range(20):
            now[0] += 1.0
            progress.report()
        progress.done, progress.built_tokens = 1, 500
        now[0] += 1.0
        progress.report()  # changed, but within LOG_EVERY of the last line
        now[0] += tokenize.LOG_EVERY
        progress.report()
        progress.done, progress.built_tokens = 2, 900
        progress.report(force=True)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("tokenize: ")]
    assert [line.split(",")[0] for line in lines] == [
        "tokenize: 0/2 shards",
        "tokenize: 1/2 shards",
        "tokenize: 2/2 shards",
    ]
