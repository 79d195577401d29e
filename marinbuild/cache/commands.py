"""The ``cache`` commands as library functions: status, show, ls; and ``clean`` (``cache gc``: ``cache.gc``).

Each returns data and has a ``format_*`` text formatter; nothing prints. A damaged status, info or lease file is
reported as ``"damaged: <message naming the file>"``, never raised and never counted as built."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.cache.lineage import format_lineage, lineage, recorded_outputs
from marinbuild.cache.text import format_age, format_size, short_json
from marinbuild.core.labels import Label
from marinbuild.engine.code_records import for_session, sentence
from marinbuild.store import fs, other_versions
from marinbuild.store import status as st
from marinbuild.store.lease import STALE_AFTER
from marinbuild.store.prefix_walk import Store
from marinbuild.store.records import read_artifact, read_info
from marinbuild.store.status import DamagedFileError
from marinbuild.store.traceback_file import existing_traceback

STALE, INCOMPLETE, WAITING = "stale", "incomplete", "waiting"


# -- cache status ------------------------------------------------------------------------------


@dataclass
class StepState:
    name: str
    output_path: str
    state: str
    status: str | None = None
    holder: str | None = None
    age: float | None = None  # seconds since the lease's last heartbeat (running/abandoned steps)
    detail: str | None = None


@dataclass
class CacheRow:
    """One target: its state (built/stale/missing/failed/running, or ``damaged: ...``) and output paths."""

    label: str
    state: str
    output_paths: list[str]
    steps: list[StepState] = field(default_factory=list)
    holder: str | None = None
    age: float | None = None


def cache_status(session: Any, labels: Iterable[str | Label]) -> list[CacheRow]:
    """The cache state of each target: one status read per step, a lease read only for RUNNING ones. A step not
    built at its current version (an abandoned run is not) is ``stale`` when another version of the same step
    name exists under the prefix, else ``missing``; ``waiting`` when it starts from a checkpoint not there yet
    whose producer is running (``needs ...`` in its detail when that producer is not running)."""
    prefix = session.settings.prefix
    stale_after = pb.stale_after_of(session)
    resolved = pb.resolve_targets(session, labels)
    output_paths = session.engine.output_paths
    steps_by_label = {label: list(dict.fromkeys(session.steps_of(label))) for label in resolved}
    all_steps = list(dict.fromkeys(s for steps in steps_by_label.values() for s in steps))
    probes = pb.probe_outputs([output_paths[s] for s in all_steps], stale_after)
    state_of = {s: _step_state(s.name, probes[output_paths[s]], prefix) for s in all_steps}
    _note_code_changes(session, state_of)
    _note_hand_offs(session, state_of, stale_after)
    return [target_row(str(label), [state_of[s] for s in steps]) for label, steps in steps_by_label.items()]


def _step_state(name: str, probe: pb.Probe, prefix: str) -> StepState:
    state = StepState(name, probe.output_path, probe.state, probe.status)
    if probe.lease is not None:
        state.holder, state.age = probe.lease.worker_id, round(probe.lease_age or 0.0, 1)
    if probe.state == pb.DAMAGED:
        state.state = f"damaged: {probe.error}"
    elif probe.state in (pb.MISSING, pb.ABANDONED):
        if probe.state == pb.ABANDONED:
            state.detail = "abandoned run (status RUNNING, lease stale or gone)"
        state.state = STALE if other_versions.has_other_version(prefix, name, exclude=probe.output_path) else pb.MISSING
    return state


def _note_code_changes(session: Any, state_of: dict[Any, StepState]) -> None:
    built = [s for s, state in state_of.items() if state.state == pb.BUILT]
    for step, changed in for_session(session).check(built).items():
        if changed:
            state_of[step].detail = sentence(changed)


def _note_hand_offs(session: Any, state_of: dict[Any, StepState], stale_after: float) -> None:
    """A step not built lacking a checkpoint is ``waiting`` while its producer runs; else its detail says it."""
    for step, state in state_of.items():
        if state.state not in (pb.MISSING, STALE) or state.detail:
            continue
        waits = pb.waits_for(session.engine.table, step, stale_after)
        if waits:
            running, line = waits
            state.state, state.detail = (WAITING, f"waiting for {line}") if running else (state.state, f"needs {line}")


def target_row(label: str, states: list[StepState]) -> CacheRow:
    """A target's row: damaged, failed or running if a step is, built if all are, else stale if one is, else missing."""
    row = CacheRow(label, pb.MISSING, [s.output_path for s in states], states)
    damaged = [s for s in states if s.state.startswith("damaged")]
    running = [s for s in states if s.state == pb.RUNNING]
    if damaged:
        row.state = damaged[0].state
    elif any(s.state == pb.FAILED for s in states):
        row.state = pb.FAILED
    elif running:
        row.state, row.holder, row.age = pb.RUNNING, running[0].holder, running[0].age
    elif any(s.state == WAITING for s in states):
        row.state = WAITING
    elif states and all(s.state == pb.BUILT for s in states):
        row.state = pb.BUILT
    elif any(s.state == STALE for s in states):
        row.state = STALE
    return row


def format_table(rows: list[CacheRow]) -> str:
    table: list[tuple[str, str, str]] = [("TARGET", "STATE", "OUTPUT")]
    for row in rows:
        state = f"running ({row.holder}, {format_age(row.age)})" if row.state == pb.RUNNING else row.state
        table.append((row.label, state, "" if len(row.steps) > 1 else (row.output_paths or ["-"])[0]))
        if len(row.steps) > 1:
            table.extend(("", f"  {s.state}", s.output_path) for s in row.steps)
    notes = [
        f"{row.label}: {s.detail}"
        for row in rows
        for s in row.steps
        if s.detail and s.detail.startswith(("code changed", "waiting for", "needs checkpoint"))
    ]
    return _columns(table) + "".join(f"{note}\n" for note in notes)


# -- cache show --------------------------------------------------------------------------------


def cache_show(session_or_prefix: Any, target_or_path: str | Label) -> dict[str, Any]:
    """Everything recorded about a target's outputs (``session_or_prefix`` a ``Session``) or one output path (relative:
    under the prefix): ``{"target", "outputs": [...]}``, as ``cache show --output json`` prints it."""
    if isinstance(session_or_prefix, str):
        prefix, session = session_or_prefix, None
    else:
        session, prefix = session_or_prefix, session_or_prefix.settings.prefix
    stale_after = pb.stale_after_of(session) if session is not None else STALE_AFTER
    text = str(target_or_path)
    if isinstance(target_or_path, Label) or text.startswith(("//", "@", ":")):
        if session is None:
            raise ValueError(f"{text} is a label: showing a target needs a session (or give an output path)")
        (label,) = pb.resolve_targets(session, [target_or_path])
        paths = list(dict.fromkeys(session.output_paths_of(label)))
        shown: dict[str, Any] = {"target": str(label), "outputs": [_show_output(p, prefix, stale_after) for p in paths]}
    else:
        path = text if "://" in text or os.path.isabs(text) else fs.join(prefix, text)
        shown = {"target": None, "outputs": [_show_output(path, prefix, stale_after)]}
    recorded = recorded_outputs(prefix)
    for out in shown["outputs"]:
        out["lineage"] = lineage(prefix, out["output_path"], recorded)
    return shown


def _show_output(path: str, prefix: str, stale_after: float) -> dict[str, Any]:
    store = Store(path)
    errors: list[str] = []
    out: dict[str, Any] = {"output_path": path, "name": pb.step_name_of(path, prefix), "exists": store.is_dir(path)}
    probe = pb.probe_output(path, stale_after)
    if probe.state == pb.DAMAGED:
        errors.append(probe.error or "damaged")
    out["status"] = probe.status
    out["info"] = info = pb.read_noting(errors, lambda: read_info(path))
    if isinstance(info, dict) and isinstance(info.get("name"), str):
        out["name"] = info["name"]
    record = pb.read_noting(errors, lambda: pb.read_lease(path, stale_after))
    live = record is not None and not record.is_stale(stale_after)
    out["lease"] = None if record is None else {"holder": record.worker_id, "age": round(record.age(), 1), "live": live}
    out["artifact"] = pb.read_noting(errors, lambda: read_artifact(path))
    out["traceback"] = existing_traceback(path) if probe.status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED) else None
    out["size"], out["files"] = store.usage(path) if out["exists"] else (0, 0)
    state: str = probe.state  # or a damage message, or "incomplete"
    if errors:
        state = f"damaged: {errors[0]}"
    elif state == pb.MISSING and out["exists"]:
        state = INCOMPLETE
    out["state"] = state
    out["errors"] = errors
    return out


def format_show(shown: dict[str, Any]) -> str:
    lines: list[str] = []
    if shown.get("target"):
        lines.append(str(shown["target"]))
    for out in shown["outputs"]:
        info = out.get("info") or {}
        lines.append(f"{out['name']}  {out['output_path']}")
        status = f" ({out['status']})" if out.get("status") else ""
        lines.append(f"  state:     {out['state']}{status}")
        size = f"size:      {format_size(out['size'])} in {out['files']} file(s)"
        lines.append(f"  {size}" if out["exists"] else "  folder:    does not exist")
        config = info.get("config")
        if isinstance(config, dict) and isinstance(config.get("label"), str):
            lines.append(f"  target:    {config['label']}")
            attrs = config.get("attrs")
            fn = attrs.get("fn") if isinstance(attrs, dict) else None
            if isinstance(fn, str):  # a python_step: the user's function, not the rule runner that calls it
                lines.append(
                    f"  function:  {fn} (its config: .executor_info's config.attrs.config, output_path, deps, srcs)"
                )
            elif isinstance(config.get("rule"), str):
                lines.append(f"  rule:      {config['rule']}")
        elif info.get("fn_name"):
            lines.append(f"  function:  {info['fn_name']}")
        lease = out.get("lease")
        if lease:
            live = "live" if lease["live"] else "stale"
            heartbeat = format_age(lease["age"])
            lines.append(f"  lease:     {live}, held by {lease['holder']}, last heartbeat {heartbeat} ago")
        if out.get("artifact") is not None:
            lines.append(f"  artifact:  {short_json(out['artifact'], 200)}")
        if out.get("traceback"):
            lines.append(f"  traceback: {out['traceback']}")
        lines.extend(f"  error:     {e}" for e in out.get("errors") or [])
        if out.get("lineage"):
            format_lineage(lines, out["lineage"])
    return "\n".join(lines) + "\n"


# -- cache ls ----------------------------------------------------------------------------------


@dataclass
class Entry:
    """A step output under a prefix: its status word (or ``damaged: ...``) and its status file's age (or None)."""

    name: str
    output_path: str
    status: str | None
    size: int
    files: int
    age: float | None


def cache_ls(prefix: str) -> list[Entry]:
    """Every step output folder under ``prefix`` (holding an info or status file), with status, size and age."""
    store = Store(prefix)
    now = time.time()
    entries: list[Entry] = []
    for path in store.step_folders():
        try:
            status = st.read_status(path)
        except DamagedFileError as exc:
            status = f"damaged: {exc}"
        mtime = store.mtime(st.status_path(path))
        age = None if mtime is None else round(now - mtime, 1)
        entries.append(Entry(pb.step_name_of(path, prefix), path, status, *store.usage(path), age))
    entries.sort(key=lambda e: e.output_path)
    return entries


def format_ls(entries: list[Entry]) -> str:
    table = [("STATUS", "SIZE", "AGE", "NAME", "OUTPUT")]
    for e in entries:
        age = format_age(e.age) if e.age is not None else "-"
        table.append((e.status or "-", format_size(e.size), age, e.name, e.output_path))
    return _columns(table) + f"{len(entries)} output(s), {format_size(sum(e.size for e in entries))}\n"


# -- clean -------------------------------------------------------------------------------------


@dataclass
class CleanResult:
    path: str
    removed: bool
    size: int = 0
    files: int = 0


def clean(workspace: Any) -> CleanResult:
    """Remove the workspace's ``.marinbuild/`` folder (``workspace``: a ``Workspace`` or its root), and nothing else:
    it holds only caches marinbuild can recompute (source file digests, build event logs). Outputs, leases,
    statuses and run infos are never touched."""
    folder = Path(getattr(workspace, "root", workspace)) / ".marinbuild"
    if not folder.is_dir():
        return CleanResult(str(folder), False)
    size, files = Store(str(folder)).usage(str(folder))
    shutil.rmtree(folder)
    return CleanResult(str(folder), True, size, files)


def format_clean(result: CleanResult) -> str:
    if not result.removed:
        return f"nothing to clean: {result.path} does not exist\n"
    return f"removed {result.path} ({format_size(result.size)} in {result.files} file(s)); outputs are untouched\n"


def _columns(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows)
