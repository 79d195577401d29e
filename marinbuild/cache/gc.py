"""``cache gc``: the outputs under the prefix that no current target uses, with the reason each may go, deleted only
when asked (``yes``).

Kept: every output a current target of the workspace (``//...``, as the BUILD files are now) uses, with all it depends
on. PATTERN offers old versions of its targets' steps, and with ``//...`` outputs of step names no target makes; other
unused outputs are left and counted. ``keep_only_used_by_patterns`` offers everything PATTERN's targets do not use,
current work included (hence the name). Never deleted: a folder under a live or unreadable lease, run info JSONs, a
folder holding a kept output. Status goes first: a killed gc leaves no step marked built without outputs.

Policies (``Policy``) only narrow what is offered: pinned outputs (every version of a ``pin = True`` target, or a
pins file's label pattern or path glob) stay; ``keep_last`` keeps the N newest versions of each step name,
``older_than`` what is more recent, ``max_bytes`` deletes the oldest only until the prefix fits. Each output a
policy keeps is listed with it."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.cache.commands import Entry, cache_ls
from marinbuild.cache.probe import RUN_INFO_FOLDER
from marinbuild.cache.text import format_age, format_size
from marinbuild.core.labels import Label
from marinbuild.store import faults, fs
from marinbuild.store.prefix_walk import Store, normalize
from marinbuild.store.status import DamagedFileError, status_path

WORKSPACE = "//..."
WORKSPACE_SCOPE = "workspace"  # kept: what any current target of the workspace uses (the default)
PATTERNS_SCOPE = "patterns"  # kept: only what PATTERN's targets use (``keep_only_used_by_patterns``)
NARROWING_FLAG = "--keep_only_used_by_patterns"


@dataclass(frozen=True)
class Policy:
    """What ``cache gc`` keeps beyond what current targets use (module docstring); the defaults keep nothing more."""

    older_than: float | None = None
    """Seconds: an output whose status was written more recently is kept."""
    keep_last: int | None = None
    """The newest versions of each step name kept, whether used or not."""
    max_bytes: int | None = None
    """Delete the oldest candidates only until the prefix holds at most this many bytes."""
    pins_files: tuple[str, ...] = ()
    """Files of pins: a label pattern (``//experiments/...``) or an output path glob under the prefix a line."""


@dataclass
class GcResult:
    """What ``cache gc`` found and did (only ``deleted`` was deleted): ``kept`` outputs of ``scope``, ``left`` unused
    ones not PATTERN's, each candidate's ``reasons``, and the ``skipped`` candidates with why."""

    prefix: str
    patterns: list[str]
    scope: str
    kept: int = 0
    left: int = 0
    candidates: list[Entry] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)
    skipped: list[dict[str, str]] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    errors: list[dict[str, str]] = field(default_factory=list)
    dry_run: bool = True
    prefix_bytes: int = 0
    """Bytes of every output under the prefix, before any deletion."""
    over_max_bytes: int = 0
    """With ``max_bytes``: what the prefix would still hold above it once every candidate went."""

    @property
    def candidate_bytes(self) -> int:
        return sum(e.size for e in self.candidates)

    @property
    def freed_bytes(self) -> int:
        gone = set(self.deleted)
        return sum(e.size for e in self.candidates if e.output_path in gone)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"candidate_bytes": self.candidate_bytes, "freed_bytes": self.freed_bytes}


def cache_gc(
    session: Any,
    patterns: Iterable[str | Label],
    yes: bool = False,
    keep_only_used_by_patterns: bool = False,
    policy: Policy = Policy(),
) -> GcResult:
    """List (and with ``yes`` delete) the unused outputs offered for ``patterns``, the whole workspace analysed."""
    texts = [str(p) for p in patterns]
    shown = " ".join(texts)
    prefix = session.settings.prefix
    stale_after = pb.stale_after_of(session)
    roots = session.load(texts)
    pin_lines = _pin_lines(policy.pins_files)
    pinned_labels = session.load([text for text, _ in pin_lines if text.startswith("//")]) if pin_lines else []
    every = session.load([WORKSPACE])
    session.analyse(list(dict.fromkeys([*every, *roots])))
    paths = session.engine.output_paths
    used_by_workspace = used_steps(session, every)
    used_by_patterns = used_steps(session, roots)
    narrow = keep_only_used_by_patterns
    keep = {normalize(paths[s]) for s in (used_by_patterns if narrow else used_by_workspace)}

    label_of = {step: str(label) for label in reversed(every) for step in session.steps_of(label)}  # the first's
    maker_of_path: dict[str, str] = {}  # a current output path -> "step name (//its:target)"
    maker_of_name: dict[str, str] = {}  # the step name a current output path has -> the same
    for step in used_by_workspace:
        maker = f"{step.name} ({label_of[step]})" if step in label_of else step.name
        maker_of_path.setdefault(normalize(paths[step]), maker)
        maker_of_name.setdefault(pb.step_name_of(paths[step], prefix), maker)
    names_of_patterns = {pb.step_name_of(paths[s], prefix) for s in used_by_patterns}
    pins: dict[str, str] = {}  # a step name -> why its every version is pinned
    targets = session.loaded.targets
    for label in every:
        if targets[label].pinned or label in pinned_labels:
            why = f"pinned: {label}" + (" has pin = True" if targets[label].pinned else " is in a pins file")
            for step in session.steps_of(label):
                pins.setdefault(pb.step_name_of(paths[step], prefix), why)
    path_pins = [(text, where) for text, where in pin_lines if not text.startswith("//")]
    whole_workspace = set(every) <= set(roots)

    result = GcResult(prefix, texts, PATTERNS_SCOPE if narrow else WORKSPACE_SCOPE, dry_run=not yes)
    run_info = normalize(fs.join(prefix, RUN_INFO_FOLDER))
    entries = cache_ls(prefix)
    result.prefix_bytes = sum(e.size for e in entries)
    newest = _newest_versions(entries, policy.keep_last)
    for entry in entries:
        path = normalize(entry.output_path)
        if path in keep:
            result.kept += 1
            continue
        if path in maker_of_path:  # only when narrowed: the current output of a target PATTERN does not use
            reason = f"the current output of {maker_of_path[path]}, which {shown} does not use"
        elif entry.name in maker_of_name:
            if not narrow and entry.name not in names_of_patterns:
                result.left += 1
                continue
            reason = f"an old version of {maker_of_name[entry.name]}"
        else:
            if not narrow and not whole_workspace:
                result.left += 1
                continue
            reason = f"no current target of the workspace makes a step named {entry.name}"
        result.candidates.append(entry)
        result.reasons[entry.output_path] = reason
    to_delete = []
    for entry in result.candidates:
        blocker = _blocker(entry.output_path, normalize(entry.output_path), keep, stale_after, run_info)
        blocker = blocker or _policy_keeps(entry, policy, pins, path_pins, newest, prefix)
        if blocker is not None:
            result.skipped.append({"output_path": entry.output_path, "reason": blocker})
        else:
            to_delete.append(entry)
    if policy.max_bytes is not None:
        to_delete = _oldest_down_to(to_delete, policy.max_bytes, result)
    store = Store(prefix)
    for entry in to_delete if yes else ():
        try:
            fs.remove(status_path(entry.output_path))  # first: never SUCCESS without the outputs
            faults.point("gc-status-removed")
            store.rmtree(entry.output_path)
        except OSError as exc:
            result.errors.append({"output_path": entry.output_path, "error": f"{type(exc).__name__}: {exc}"})
        else:
            result.deleted.append(entry.output_path)
    return result


def _pin_lines(files: Iterable[str]) -> list[tuple[str, str]]:
    """``(pin, "FILE:LINE")`` for each line of the pins files that is not blank or a ``#`` comment."""
    lines = []
    for name in files:
        for number, line in enumerate(Path(name).read_text().splitlines(), 1):
            text = line.split("#", 1)[0].strip()
            if text:
                lines.append((text, f"{name}:{number}"))
    return lines


def _newest_versions(entries: list[Entry], keep_last: int | None) -> set[str]:
    """The output paths of the ``keep_last`` newest versions of each step name (by their status's age)."""
    if not keep_last:
        return set()
    by_name: dict[str, list[Entry]] = {}
    for entry in entries:
        by_name.setdefault(entry.name, []).append(entry)
    never = float("inf")  # an output without a status counts as the oldest
    return {
        e.output_path
        for versions in by_name.values()
        for e in sorted(versions, key=lambda e: never if e.age is None else e.age)[:keep_last]
    }


def _policy_keeps(
    entry: Entry, policy: Policy, pins: dict[str, str], path_pins: list[tuple[str, str]], newest: set[str], prefix: str
) -> str | None:
    """Why a policy keeps ``entry`` (None: none does)."""
    if entry.name in pins:
        return pins[entry.name]
    relative = normalize(entry.output_path)[len(normalize(prefix)) :].lstrip("/")
    for pattern, where in path_pins:
        if fnmatch.fnmatchcase(relative, pattern.strip("/")) or fnmatch.fnmatchcase(entry.output_path, pattern):
            return f"pinned: matches {pattern} ({where})"
    if entry.output_path in newest:
        return f"one of the {policy.keep_last} newest versions of {entry.name} (--keep_last)"
    if policy.older_than is not None and (entry.age is None or entry.age < policy.older_than):
        age = "age unknown" if entry.age is None else f"written {format_age(entry.age)} ago"
        return f"newer than --older_than {format_age(policy.older_than)} ({age})"
    return None


def _oldest_down_to(candidates: list[Entry], max_bytes: int, result: GcResult) -> list[Entry]:
    """The oldest of ``candidates`` whose deletion brings the prefix to ``max_bytes``; the others are skipped."""
    excess = result.prefix_bytes - max_bytes
    chosen: list[Entry] = []
    for entry in sorted(candidates, key=lambda e: -(e.age or 0.0)):
        if excess > 0:
            chosen.append(entry)
            excess -= entry.size
        else:
            why = f"not needed: the prefix is within --max_bytes {format_size(max_bytes)} without it"
            result.skipped.append({"output_path": entry.output_path, "reason": why})
    result.over_max_bytes = max(excess, 0)
    return chosen


def _blocker(output_path: str, normalized: str, keep: set[str], stale_after: float, run_info: str) -> str | None:
    if run_info == normalized or run_info.startswith(normalized + "/"):
        return f"holds the run info JSONs ({run_info})"
    try:
        record = pb.read_lease(output_path, stale_after)
    except DamagedFileError as exc:
        return f"damaged: {exc}"
    if record is not None and not record.is_stale(stale_after):
        return f"live lease held by {record.worker_id} (last heartbeat {format_age(record.age())} ago)"
    return "contains a kept output" if any(k.startswith(normalized + "/") for k in keep) else None


def used_steps(session: Any, labels: Iterable[Label]) -> set[Any]:
    """The canonical steps of ``labels``' closure and all they depend on; ``labels`` analysed in ``session``."""
    engine = session.engine
    table = engine.table
    todo = []
    for label in session.loaded.closure(list(labels)):
        for step in session.analysis.steps_of.get(label, []):
            engine.add(step)
            todo.append(engine.canonicalize(step))
    seen: set[Any] = set()
    while todo:
        step = todo.pop()
        if step in seen:
            continue
        seen.add(step)
        todo.extend([*table.dependencies[step], *table.pseudo_dependencies[step]])
    return seen


def format_gc(result: GcResult) -> str:
    """What is kept and why, each candidate with what happened to it and why it may go, then the totals."""
    shown = " ".join(result.patterns)
    if result.scope == WORKSPACE_SCOPE:
        lines = [f"kept {result.kept} output(s) that current targets of the workspace ({WORKSPACE}) use"]
        if result.left:
            lines.append(f"left alone {result.left} unused output(s) outside {shown} (cache gc {WORKSPACE} lists them)")
    else:
        narrowed = f"{NARROWING_FLAG}: other targets' outputs are not kept"
        lines = [f"kept {result.kept} output(s) that {shown} uses ({narrowed})"]
    skipped = {s["output_path"]: s["reason"] for s in result.skipped}
    deleted = set(result.deleted)
    errors = {e["output_path"]: e["error"] for e in result.errors}
    for e in result.candidates:
        if e.output_path in skipped:
            mark = f"skipped ({skipped[e.output_path]})"
        elif e.output_path in errors:
            mark = f"not deleted ({errors[e.output_path]})"
        elif e.output_path in deleted:
            mark = "deleted"
        else:
            mark = "would delete"
        lines.append(f"{format_size(e.size):>10}  {e.output_path}  {mark}: {result.reasons[e.output_path]}")
    if result.over_max_bytes:
        lines.append(
            f"the prefix stays {format_size(result.over_max_bytes)} over --max_bytes: the rest is used, pinned or kept"
        )
    n = len(result.candidates)
    offered = "unused output(s)" if result.scope == WORKSPACE_SCOPE else f"output(s) {shown} does not use"
    if result.dry_run:
        lines.append(f"{n} {offered}, {format_size(result.candidate_bytes)}. Nothing deleted (confirm with --yes).")
    else:
        lines.append(
            f"deleted {len(result.deleted)} of {n} {offered}, freed {format_size(result.freed_bytes)}; "
            f"{len(result.skipped)} skipped."
        )
    return "\n".join(lines) + "\n"
