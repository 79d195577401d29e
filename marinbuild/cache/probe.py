"""What is on disk for one output path: its state and lease, for the cache commands. ``probe_output`` reads one status
file, and the lease only when the status is RUNNING; a damaged file is reported as ``state == "damaged"`` with the
message naming the file, never raised. ``waits_for``: the checkpoint a step not built starts from and lacks
(``marinbuild.run.handoff``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from marinbuild.core.labels import Label, LabelError, parse_label
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.versions import VersionTable
from marinbuild.run.handoff import hand_offs, last_checkpoint
from marinbuild.store import fs
from marinbuild.store import status as st
from marinbuild.store.lease import STALE_AFTER, LeaseRecord, lease_path, parse_lease
from marinbuild.store.lease_factory import lease_for
from marinbuild.store.prefix_walk import normalize
from marinbuild.store.status import DamagedFileError

RUN_INFO_FOLDER = "experiments"  # Marin's run infos are the files directly in it (gc never deletes them)


# One output path's state as the plan sees it, plus ``damaged``: what ``cache`` commands print.
BUILT, MISSING, FAILED, RUNNING, ABANDONED, DAMAGED = "built", "missing", "failed", "running", "abandoned", "damaged"

_HASH_SUFFIX = re.compile(r"-[0-9a-f]{6}\Z")
T = TypeVar("T")


@dataclass
class Probe:
    output_path: str
    state: str
    status: str | None = None
    lease: LeaseRecord | None = None
    error: str | None = None

    @property
    def lease_age(self) -> float | None:
        return None if self.lease is None else self.lease.age()


def read_noting(errors: list[str], read: Callable[[], T]) -> T | None:
    """``read()``, or None with its ``DamagedFileError`` message (naming the file) added to ``errors``."""
    try:
        return read()
    except DamagedFileError as exc:
        errors.append(str(exc))
        return None


def read_lease(output_path: str, stale_after: float = STALE_AFTER) -> LeaseRecord | None:
    """The lease record beside ``output_path`` (None if none); DamagedFileError if unreadable."""
    if fs.is_local(output_path):
        return lease_for(output_path, "marinbuild-cache-reader", stale_after).holder()
    path = lease_path(output_path)
    data = fs.read_bytes(path)
    return None if data is None else parse_lease(path, data)


def probe_output(output_path: str, stale_after: float = STALE_AFTER) -> Probe:
    """The state of one output: one status read, plus one lease read if the status is RUNNING."""
    try:
        status = st.read_status(output_path)
    except DamagedFileError as exc:
        return Probe(output_path, DAMAGED, error=str(exc))
    if status == st.STATUS_SUCCESS:
        return Probe(output_path, BUILT, status)
    if status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED):
        return Probe(output_path, FAILED, status)
    if status == st.STATUS_RUNNING:
        try:
            record = read_lease(output_path, stale_after)
        except DamagedFileError as exc:
            return Probe(output_path, DAMAGED, status, error=str(exc))
        if record is not None and not record.is_stale(stale_after):
            return Probe(output_path, RUNNING, status, record)
        return Probe(output_path, ABANDONED, status, record)
    return Probe(output_path, MISSING, status)


def probe_outputs(output_paths: Iterable[str], stale_after: float = STALE_AFTER, workers: int = 16) -> dict[str, Probe]:
    """``probe_output`` for many paths; remote prefixes are read concurrently (as the plan does)."""
    paths = list(dict.fromkeys(output_paths))
    if len(paths) < 32 or all(fs.is_local(p) for p in paths):
        return {p: probe_output(p, stale_after) for p in paths}
    with ThreadPoolExecutor(workers) as pool:
        return dict(zip(paths, pool.map(lambda p: probe_output(p, stale_after), paths), strict=True))


def waits_for(table: VersionTable, step: ExecutorStep, stale_after: float = STALE_AFTER) -> tuple[bool, str] | None:
    """The first missing checkpoint ``step`` starts from: (its producer runs, a line naming both); None if none."""
    for h in hand_offs(table, step):
        if not h.there():
            path = table.output_paths[h.producer]
            state = probe_output(path, stale_after).state
            return state == RUNNING, f"{h} ({h.producer.name} {state}; its last checkpoint: {last_checkpoint(path)})"
    return None


def step_name_of(output_path: str, prefix: str) -> str:
    """The step name an output path under ``prefix`` has (``<name>-<hash>`` without the hash)."""
    base, out = normalize(prefix), normalize(output_path)
    rel = out[len(base) :].lstrip("/") if out.startswith(base.rstrip("/") + "/") else out
    return _HASH_SUFFIX.sub("", rel)


def stale_after_of(session: Any) -> float:
    value = getattr(session.settings, "stale_after", None)
    return float(value) if value is not None else STALE_AFTER


def resolve_targets(session: Any, targets: Iterable[str | Label]) -> list[Label]:
    """The labels ``targets`` (labels or patterns) name, loaded and analysed in ``session`` unless they are."""
    targets = list(targets)
    labels: list[Label] | None = None
    if session.analysis is not None and session.engine is not None:
        try:
            labels = [t if isinstance(t, Label) else parse_label(t, session.current_package()) for t in targets]
        except LabelError:
            labels = None
        if labels is not None and not all(label in session.analysis.steps_of for label in labels):
            labels = None
    if labels is None:
        labels = session.load([str(t) for t in targets])
        session.analyse(labels)
    for label in labels:
        for step in session.analysis.steps_of[label]:
            session.engine.add(step)
    return labels
