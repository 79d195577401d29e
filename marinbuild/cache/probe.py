"""What is on disk for one output path: its state, lease, and other versions of the same step.

``probe_output`` reads one status file, and the lease only when the status is RUNNING; it
never raises for a damaged file but reports ``state == "damaged"`` with the message
(which names the file). ``find_versions`` lists the sibling folders
``<prefix>/<name>-<hash>`` that are other versions of a step.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from marinbuild.cache.store import Store, normalize
from marinbuild.core.labels import Label, LabelError, parse_label
from marinbuild.store import fs
from marinbuild.store import status as st
from marinbuild.store.lease import STALE_AFTER, LeaseRecord, lease_path, parse_lease
from marinbuild.store.lease_factory import lease_for
from marinbuild.store.records import INFO_FILE, read_info
from marinbuild.store.status import DamagedFileError


class OutputState(StrEnum):
    """One output path's state as the plan sees it, plus ``damaged`` (its value is what ``cache`` commands print)."""

    BUILT = "built"
    MISSING = "missing"
    FAILED = "failed"
    RUNNING = "running"
    ABANDONED = "abandoned"
    DAMAGED = "damaged"


BUILT = OutputState.BUILT
MISSING = OutputState.MISSING
FAILED = OutputState.FAILED
RUNNING = OutputState.RUNNING
ABANDONED = OutputState.ABANDONED
DAMAGED = OutputState.DAMAGED

_HASH_SUFFIX = re.compile(r"-[0-9a-f]{6}\Z")


@dataclass
class Probe:
    """One output path's state, as the plan sees it (plus ``damaged``)."""

    output_path: str
    state: OutputState
    status: str | None = None
    lease: LeaseRecord | None = None
    error: str | None = None

    @property
    def lease_age(self) -> float | None:
        return None if self.lease is None else self.lease.age()


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


def step_name_of(output_path: str, prefix: str) -> str:
    """The step name an output path under ``prefix`` has (``<name>-<hash>`` without the hash)."""
    base, out = normalize(prefix), normalize(output_path)
    rel = out[len(base) :].lstrip("/") if out.startswith(base.rstrip("/") + "/") else out
    return _HASH_SUFFIX.sub("", rel)


def sibling_paths(prefix: str, name: str, exclude: str | None = None) -> list[str]:
    """Folders ``<prefix>/<name>-<hash>`` (other versions of step ``name``) except ``exclude``."""
    where = fs.join(prefix, name)
    parent, _, base = where.rpartition("/")
    if not parent:
        return []
    pattern = re.compile(re.escape(base) + r"-[0-9a-f]{6}\Z")
    skip = normalize(exclude) if exclude else None
    found = []
    for folder in Store(prefix).subdirs(parent):
        if pattern.match(folder):
            path = fs.join(parent, folder)
            if normalize(path) != skip:
                found.append(path)
    return found


def has_other_version(prefix: str, name: str, exclude: str | None = None) -> bool:
    """Whether some other version of step ``name`` left an output (a folder with ``.executor_info``/status)."""
    return any(
        fs.exists(fs.join(p, INFO_FILE)) or fs.exists(st.status_path(p)) for p in sibling_paths(prefix, name, exclude)
    )


def with_other_versions(prefix: str, outputs: dict[str, str], workers: int = 16) -> set[str]:
    """The step names of ``outputs`` (name -> its current output path) for which ``has_other_version`` holds, with
    one listing per distinct parent folder and the file checks in parallel (a remote prefix: no round trip per step)."""
    from concurrent.futures import ThreadPoolExecutor

    parents: dict[str, list[str]] = {}
    for name in outputs:
        parent = fs.join(prefix, name).rpartition("/")[0]
        if parent:
            parents.setdefault(parent, []).append(name)
    if not parents:
        return set()
    store = Store(prefix)
    with ThreadPoolExecutor(max_workers=min(workers, len(parents))) as pool:
        listings = dict(zip(parents, pool.map(store.subdirs, parents), strict=True))
    candidates: list[tuple[str, str]] = []
    for parent, names in parents.items():
        for name in names:
            base = fs.join(prefix, name).rpartition("/")[2]
            pattern = re.compile(re.escape(base) + r"-[0-9a-f]{6}\Z")
            skip = normalize(outputs[name])
            candidates.extend(
                (name, fs.join(parent, folder))
                for folder in listings[parent]
                if pattern.match(folder) and normalize(fs.join(parent, folder)) != skip
            )
    if not candidates:
        return set()

    def left_output(path: str) -> bool:
        return fs.exists(fs.join(path, INFO_FILE)) or fs.exists(st.status_path(path))

    with ThreadPoolExecutor(max_workers=min(workers, len(candidates))) as pool:
        found = list(pool.map(left_output, [path for _name, path in candidates]))
    return {name for (name, _path), present in zip(candidates, found, strict=True) if present}


@dataclass
class OtherVersion:
    output_path: str
    info: dict[str, Any]
    mtime: float | None


def latest_other_version(prefix: str, name: str, exclude: str | None = None) -> OtherVersion | None:
    """The most recent other version of step ``name`` whose ``.executor_info`` parses.

    Most recent by the modification time of its ``.executor_status``, else of its ``.executor_info``.
    """
    store = Store(prefix)
    best: OtherVersion | None = None
    for path in sibling_paths(prefix, name, exclude):
        try:
            info = read_info(path)
        except DamagedFileError:
            continue
        if info is None or not isinstance(info.get("version"), dict):
            continue
        mtime = store.mtime(st.status_path(path))
        if mtime is None:
            mtime = store.mtime(fs.join(path, INFO_FILE))
        candidate = OtherVersion(path, info, mtime)
        if best is None or (mtime or 0.0) > (best.mtime or 0.0):
            best = candidate
    return best


def stale_after_of(session: Any) -> float:
    value = getattr(session.settings, "stale_after", None)
    return float(value) if value is not None else STALE_AFTER


def resolve_targets(session: Any, targets: Iterable[str | Label]) -> list[Label]:
    """The labels ``targets`` name, analysed in ``session`` (loading and analysing them if needed).

    Already-analysed labels are used as they are; anything else (patterns such as ``//pkg/...``
    too) is loaded with ``session.load`` and analysed.
    """
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
