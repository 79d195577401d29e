"""Build progress: a live display on a terminal, one plain line per event otherwise.

``ProgressDisplay`` is a thread-safe event listener. On a terminal a ``rich`` live region (done/total, running and
waiting steps, elapsed times) is redrawn by rich's refresh thread, finished steps and failures printed above it.
Elsewhere it writes a line per interesting event (a step's progress only when changed, at most every
``PROGRESS_LINE_EVERY`` seconds). ``close()`` stops the live region of an interrupted build."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from marinbuild.run import events as ev
from marinbuild.ui._text import describe_error, format_duration

PROGRESS_LINE_EVERY = 10.0
"""Off a terminal, seconds between two progress lines of one step (and only when its progress changed)."""

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

MAX_ROWS = 12  # Running/waiting steps shown in the live region; the rest are counted in one line.

_Key = tuple[str | None, str | None]


def _key(event: ev.Event) -> _Key:
    return (event.step, event.output_path)


@dataclass
class _State:
    total: int | None = None
    planned_to_run: int = 0
    planned_built: int = 0
    done: int = 0
    failed: int = 0
    not_run: int = 0
    build_start: float | None = None
    build_end: float | None = None
    started_at: dict[_Key, float] = field(default_factory=dict)  # running now (in start order) -> start time
    waiting: dict[_Key, tuple[str, float]] = field(default_factory=dict)  # waiting for another runner
    step_start: dict[_Key, float] = field(default_factory=dict)  # every started step, for its finish line
    progress: dict[_Key, str] = field(default_factory=dict)  # running steps' last ``progress`` detail
    progress_shown: dict[_Key, tuple[str, float]] = field(default_factory=dict)  # last line printed off a tty

    def counter(self) -> str:
        total = self.total if self.total is not None else (self.planned_to_run or None)
        return f"[{self.done}/{total if total is not None else '?'}]"


class ProgressDisplay:
    """On ``console_file`` (stderr); ``is_tty`` None: its ``isatty()``; ``console``: a ``rich`` Console to draw on."""

    def __init__(
        self, console_file: TextIO | None = None, is_tty: bool | None = None, *, console: Console | None = None
    ):
        self.file: TextIO = console_file if console_file is not None else sys.stderr
        if is_tty is None:
            is_tty = console.is_terminal if console is not None else _isatty(self.file)
        self.is_tty = is_tty
        self._console = console
        self._live: Live | None = None
        self._state = _State()
        self._state_lock = threading.Lock()  # held briefly; also taken by the live region's refresh thread
        self._emit_lock = threading.RLock()  # orders output; never held by the refresh thread
        self._closed = False

    # -- the listener -------------------------------------------------------------------------
    def __call__(self, event: ev.Event) -> None:
        with self._emit_lock:
            if self._closed:
                return
            with self._state_lock:
                line = self._update(event)
            if self.is_tty:
                self._show_tty(event, line)
            elif line is not None:
                self.file.write(line[0] + "\n")
                self.file.flush()

    def close(self) -> None:
        """Stop the live region (its last frame stays on screen); later events are ignored."""
        with self._emit_lock:
            self._stop_live()
            self._closed = True

    # -- state --------------------------------------------------------------------------------
    def _update(self, event: ev.Event) -> tuple[str, str] | None:
        """Update the state for ``event``; return the line to show for it (text, rich style), if any."""
        s = self._state
        kind, name, key = event.kind, event.step or "?", _key(event)
        if kind in (ev.PLANNED, ev.BUILD_STARTED) and s.build_end is not None:
            s = self._state = _State()  # a new build on the same display
        if kind == ev.PLANNED:
            if event.detail == "built":
                s.planned_built += 1
            else:
                s.planned_to_run += 1
            if event.data.get("dry_run"):
                return f"[dry run] {name}: {event.detail} ({event.output_path})", "cyan"
            return None
        if kind == ev.BUILD_STARTED:
            s.total = int(event.data.get("steps", s.planned_to_run))
            s.build_start = event.time
            already = f", {s.planned_built} already built" if s.planned_built else ""
            return f"building: {s.total} step{'s' if s.total != 1 else ''} to run{already}", "bold"
        if kind == ev.BUILD_FINISHED:
            s.build_end = event.time
            s.started_at.clear()
            s.waiting.clear()
            return None  # the build summary that follows says how the build ended
        if kind == ev.WAITING:
            s.waiting[key] = (event.detail or "held by another runner", event.time)
            return f"waiting for {name}: {event.detail or 'held by another runner'}", "yellow"
        if kind == ev.PROGRESS:
            if key not in s.started_at:
                return None
            detail = s.progress[key] = event.detail or ""
            shown = s.progress_shown.get(key)
            if shown is not None and (shown[0] == detail or event.time - shown[1] < PROGRESS_LINE_EVERY):
                return None  # a line only when the progress changed, at most every PROGRESS_LINE_EVERY seconds
            s.progress_shown[key] = (detail, event.time)
            return f"{name}: {detail}", "dim"
        if kind == ev.STARTED:
            s.waiting.pop(key, None)
            s.started_at[key] = event.time
            s.step_start[key] = event.time
            return f"started {name} ({event.output_path})", "dim"
        if kind not in (ev.SUCCEEDED, ev.CACHED, ev.FAILED, ev.DEP_FAILED, ev.SKIPPED):
            return None
        s.started_at.pop(key, None)
        s.waiting.pop(key, None)
        s.progress.pop(key, None)
        s.progress_shown.pop(key, None)
        start = s.step_start.pop(key, None)
        s.done += 1
        took = f" ({format_duration(event.time - start)})" if start is not None else ""
        if kind == ev.SUCCEEDED:
            return f"{s.counter()} built {name}{took}", "green"
        if kind == ev.CACHED:
            return f"{s.counter()} cached {name}" + (f": {event.detail}" if event.detail else ""), "green"
        if kind == ev.FAILED:
            s.failed += 1
            return f"{s.counter()} FAILED {name}: {describe_error(event.step, event.error)}", "bold red"
        s.not_run += 1
        if kind == ev.DEP_FAILED:
            return f"{s.counter()} not running {name}: {event.detail or 'a dependency failed'}", "red"
        return f"{s.counter()} skipped {name}" + (f" ({event.detail})" if event.detail else ""), "yellow"

    # -- terminal -----------------------------------------------------------------------------
    def _show_tty(self, event: ev.Event, line: tuple[str, str] | None) -> None:
        if event.kind in (ev.BUILD_STARTED, ev.STARTED, ev.WAITING) and self._live is None:
            self._start_live()
        if line is not None and event.kind not in (ev.BUILD_STARTED, ev.BUILD_FINISHED, ev.STARTED, ev.PROGRESS):
            from rich.text import Text

            self.console.print(Text(line[0], style=line[1]))
        if event.kind == ev.BUILD_FINISHED:
            self._stop_live()

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.file, force_terminal=True if self.is_tty else None)
        return self._console

    def _start_live(self) -> None:
        from rich.live import Live

        self._live = Live(get_renderable=self.renderable, console=self.console, refresh_per_second=4, transient=False)
        self._live.start(refresh=True)

    def _stop_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def renderable(self) -> RenderableType:
        """The live region's current frame (what the refresh thread draws)."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.spinner import Spinner
        from rich.table import Table
        from rich.text import Text

        now = time.time()
        with self._state_lock:
            s = self._state
            total = s.total if s.total is not None else s.planned_to_run
            listed = [
                ("  ▸ ", "cyan", k[0] or "?", now - t, s.progress.get(k, ""), "dim") for k, t in s.started_at.items()
            ]
            listed += [
                ("  … ", "yellow", k[0] or "?", now - t, f"waiting: {d}", "yellow") for k, (d, t) in s.waiting.items()
            ]
            end = s.build_end if s.build_end is not None else now
            elapsed = end - s.build_start if s.build_start is not None else 0.0
            finished = s.build_end is not None
            failed, not_run = s.failed, s.not_run
            done = s.done

        done_mark = Text("✘", style="red") if failed else Text("✔", style="green")
        mark: RenderableType = done_mark if finished else Spinner("dots", style="cyan")
        header = Table.grid(padding=(0, 1))
        header.add_row(
            mark,
            Text("Build finished" if finished else "Building", style="bold"),
            ProgressBar(
                total=max(total, 1),
                completed=done if total else 1,
                width=30,
                complete_style="cyan",
                finished_style="green",
            ),
            Text(f"{done}/{total}"),
            Text(format_duration(elapsed), style="dim"),
            Text(f"{failed} failed", style="bold red") if failed else Text(""),
            Text(f"{not_run} not run", style="yellow") if not_run else Text(""),
        )
        rows = Table.grid(padding=(0, 2))  # running steps first, then waiting ones
        for sign, style, name, took, note, note_style in listed[:MAX_ROWS]:
            rows.add_row(
                Text(sign + name, style=style), Text(format_duration(took), style="dim"), Text(note, style=note_style)
            )
        shown = min(len(listed), MAX_ROWS)
        hidden = len(listed) - shown
        parts: list[Any] = [header]
        if shown:
            parts.append(rows)
        if hidden:
            parts.append(Text(f"  … and {hidden} more", style="dim"))
        return Group(*parts)


def _isatty(file: Any) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):
        return False
