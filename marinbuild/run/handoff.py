"""Checkpoint hand-offs: a step that starts from another step's checkpoint waits for the checkpoint, not the step.

A hand-off is a pseudo-dependency on ``<producer>/checkpoints/step-N`` (``checkpoint(":p", step = N)``, Marin's
``p.cd("checkpoints/step-N").nonblocking()``), there once its ``metadata.json`` reads whole (levanter writes it last,
and in place on a local disk: a file that exists may not be written yet). A step that will run needs the producers of
checkpoints not yet there (``needs``); a built step needs none, so a producer training on never makes it stale.
``HandOffs`` holds such a step out of the schedule until its checkpoints are there (a ``waiting`` event), and fails it
with ``MissingCheckpointError`` once a producer ended, or is not in this build, without it. One thread watches: local
checkpoints by inotify on the nearest existing folder, others by polling with bounded backoff; a producer's end wakes
it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass

from marinbuild.core.placeholders import ExecutorStep, InputName
from marinbuild.core.versions import VersionTable
from marinbuild.core.walk import walk_config
from marinbuild.run import events as ev
from marinbuild.store import fs
from marinbuild.store import status as st
from marinbuild.store.prefix_walk import Store

_CHECKPOINT = re.compile(r"checkpoints/step-(\d+)/?")
FIRST_DELAY, MAX_DELAY = 0.5, 30.0
"""Seconds between reads of a checkpoint on an object store: from the first, doubling up to the last (which is also
how often a watched local checkpoint is looked at without a notification)."""


class MissingCheckpointError(Exception):
    """A step's checkpoint can no longer come: its producer ended (or is not running) without it."""


@dataclass(frozen=True)
class HandOff:
    producer: ExecutorStep
    path: str  # The checkpoint's folder.
    step: int

    def there(self) -> bool:
        return complete(self.path)

    def __str__(self) -> str:
        return f"checkpoint step-{self.step} of {self.producer.name}"


def complete(checkpoint: str) -> bool:
    """Whether ``checkpoint``'s ``metadata.json`` is there and whole: JSON naming its step (levanter's own test)."""
    data = fs.read_bytes(fs.join(checkpoint, "metadata.json"))
    try:
        return data is not None and isinstance(json.loads(data).get("step"), int)
    except (ValueError, AttributeError):
        return False


def hand_offs(table: VersionTable, step: ExecutorStep) -> list[HandOff]:
    """The checkpoints ``step`` (a canonical step) starts from."""
    if not table.pseudo_dependencies.get(step):
        return []
    out = []
    for event in walk_config(step.config):
        name = getattr(event, "input_name", None)
        if isinstance(name, InputName) and name.step is not None and not name.block_on_step:
            match = _CHECKPOINT.fullmatch(name.name or "")
            if match:
                producer = table.canonicalize(name.step)
                path = fs.join(table.output_paths[producer], f"checkpoints/step-{match[1]}")
                out.append(HandOff(producer, path, int(match[1])))
    return out


def needs(table: VersionTable, step: ExecutorStep) -> list[ExecutorStep]:
    """What ``step`` needs to run: its dependencies, and the producers of its checkpoints not there yet."""
    deps = table.dependencies[step]
    if not table.pseudo_dependencies.get(step):
        return deps
    return [*deps, *(h.producer for h in hand_offs(table, step) if not h.there())]


def last_checkpoint(producer_path: str) -> str:
    """``step-M``, the producer's latest complete checkpoint, or ``none``."""
    folder = fs.join(producer_path, "checkpoints")
    names = Store(producer_path).names(folder) or []
    steps = sorted((int(n[5:]) for n in names if re.fullmatch(r"step-\d+", n)), reverse=True)
    return next((f"step-{n}" for n in steps if complete(fs.join(folder, f"step-{n}"))), "none")


Release = Callable[[ExecutorStep, BaseException | None], None]


class HandOffs:
    """The schedule's holds of one run (``run.scheduler.Holds``): steps waiting for checkpoints, and their watcher."""

    def __init__(self, table: VersionTable, to_run: list[ExecutorStep], bus: ev.EventBus):
        self._table, self._bus = table, bus
        self._offs = {step: offs for step in to_run if (offs := hand_offs(table, step))}
        self._producers = {h.producer for offs in self._offs.values() for h in offs}
        self._in_build = set(to_run) if self._offs else set()
        self._ended: dict[ExecutorStep, bool] = {}
        self._held: dict[ExecutorStep, tuple[list[HandOff], Release]] = {}
        self._lock = threading.Lock()
        self._pipe: tuple[int, int] | None = None
        self._closed = False

    def hold(self, step: ExecutorStep, release: Release) -> bool:
        """True if ``step`` starts from checkpoints: the watcher later calls ``release(step, None or error)``."""
        offs = self._offs.get(step)
        if offs is None:
            return False
        with self._lock:
            self._held[step] = (offs, release)
            if self._pipe is None:
                self._pipe = os.pipe()
                for fd in self._pipe:
                    os.set_blocking(fd, False)
                threading.Thread(target=self._watch, name="marinbuild-handoffs", daemon=True).start()
            self._poke_locked()
        return True

    def ended(self, step: ExecutorStep, ok: bool) -> None:
        """A step of this build ended: ``ok`` if it succeeded (or was found built), else it failed or did not run."""
        if step not in self._producers:
            return
        with self._lock:
            self._ended[step] = ok
            self._poke_locked()

    def close(self) -> None:
        """The schedule is over: the watcher stops, releasing nothing more."""
        with self._lock:
            self._poke_locked()
            self._closed = True

    def _poke_locked(self) -> None:
        if self._pipe is not None and not self._closed:
            with contextlib.suppress(BlockingIOError):  # a wake-up is pending already
                os.write(self._pipe[1], b".")

    def _gone(self, h: HandOff, ended: dict[ExecutorStep, bool]) -> str | None:
        """How ``h``'s producer ended, None while it may still write the checkpoint (asked before looking for it)."""
        if h.producer in ended:
            return "finished" if ended[h.producer] else "failed"
        if h.producer in self._in_build:
            return None
        status = st.read_status(self._table.output_paths[h.producer])
        return {st.STATUS_SUCCESS: "finished", st.STATUS_FAILED: "failed"}.get(status or "", "is not running")

    def _watch(self) -> None:
        assert self._pipe is not None
        pipe = self._pipe
        try:
            inotify: _Inotify | None = _Inotify()
        except (OSError, AttributeError):  # not Linux, or no inotify here: read again after a backoff
            inotify = None
        fds = [pipe[0]] if inotify is None else [pipe[0], inotify.fd]
        announced: set[ExecutorStep] = set()
        delay = FIRST_DELAY
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    held, ended = list(self._held.items()), dict(self._ended)
                polled = inotify is None
                for step, (offs, release) in held:
                    try:  # watch, then look, so no change is missed; ask whether the producer ended before looking
                        polled |= inotify is not None and not all([inotify.watch(h.path) for h in offs])
                        gone = [self._gone(h, ended) for h in offs]
                        pending = [(h, how) for h, how in zip(offs, gone, strict=True) if not h.there()]
                        error = next((self._missing(step, h, how) for h, how in pending if how), None)
                    except Exception as exc:  # the store failed us: fail the step rather than hold it for ever
                        pending, error = [], MissingCheckpointError(f"{step.name}: cannot look for {offs[0]}: {exc}")
                    if pending and error is None:
                        if step not in announced:
                            announced.add(step)
                            where, what = self._table.output_paths[step], ", ".join(str(h) for h, _ in pending)
                            self._bus.emit(ev.WAITING, step=step.name, output_path=where, detail=what)
                        continue
                    with self._lock:
                        del self._held[step]
                    release(step, error)
                # inotify sees no other machine's writes to a shared file system: look again now and then anyway
                ready, _, _ = select.select(fds, [], [], (delay if polled else MAX_DELAY) if held else None)
                delay = delay if ready else min(delay * 2, MAX_DELAY)
                for fd in ready:
                    os.read(fd, 1 << 16)  # what is left wakes the next select at once
        finally:
            with self._lock:
                self._closed = True
                for fd in [*pipe, *fds[1:]]:
                    os.close(fd)

    def _missing(self, step: ExecutorStep, h: HandOff, how: str) -> MissingCheckpointError:
        last = last_checkpoint(self._table.output_paths[h.producer])
        return MissingCheckpointError(
            f"{step.name}: starts from {h}, but {h.producer.name} {how} without it; its last checkpoint: {last}"
        )


class _Inotify:
    """Linux inotify: readable once an entry is made, renamed into, or written in a watched folder."""

    _MASK = 0x008 | 0x080 | 0x100  # IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE

    def __init__(self) -> None:
        import ctypes

        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._watched: set[str] = set()

    def watch(self, checkpoint: str) -> bool:
        """Watch the nearest folder on the way to ``checkpoint``'s ``metadata.json`` that exists; False if remote."""
        if not fs.is_local(checkpoint):
            return False
        folder = fs.local_path(checkpoint)
        while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
            folder = os.path.dirname(folder)
        if folder not in self._watched and self._libc.inotify_add_watch(self.fd, folder.encode(), self._MASK) >= 0:
            self._watched.add(folder)
        return True
