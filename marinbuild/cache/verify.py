"""``marinbuild cache verify PATTERN``: recompute output digests and compare them with the manifests.

The targets' steps and (unless ``deps=False``) their dependencies are checked. A metadata file that does not parse makes
the step damaged; a lease beside a built step whose runner is gone is a leftover. ``repair_metadata`` removes unparsable
metadata, leftover leases (under their flock) and killed writers' old ``.tmp-*`` files. A built step's outputs are
hashed against its action record's manifest: deleted, truncated or modified files are damage, added ones are reported. A
damaged step's ``.executor_status`` is removed (on GCS at the verified generation) so the next build reruns it, and the
findings go to ``.marinbuild_verify.json``. Steps built by Marin (no manifest) are unverified and left alone."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.core.graph import StepGraph
from marinbuild.store import fs, manifest, records
from marinbuild.store import status as st
from marinbuild.store.lease import STALE_AFTER, lease_path, parse_lease
from marinbuild.store.lease_factory import lease_for
from marinbuild.store.lease_local import LocalFileLease
from marinbuild.store.status import DamagedFileError

# What verify found of one step: what the JSON report and the verify file say.
OK, DAMAGED, UNVERIFIED, NOT_BUILT = "ok", "damaged", "unverified", "not built"

REPORT_FILE = ".marinbuild_verify.json"


# How one file differs from the manifest: what the JSON report says.
MODIFIED, TRUNCATED, DELETED, ADDED = "modified", "truncated", "deleted", "added"


@dataclass
class FileProblem:
    path: str  # relative to the step's output folder
    kind: str
    expected_size: int | None = None
    actual_size: int | None = None


@dataclass
class StepVerification:
    """One step's verification: first error, whether invalidated, unparsable ``metadata``, ``--repair``'s removals."""

    output_path: str
    state: str
    name: str | None = None
    label: str | None = None
    files: int = 0
    bytes: int = 0
    problems: list[FileProblem] = field(default_factory=list)
    error: str | None = None
    invalidated: bool = False
    metadata: list[str] = field(default_factory=list)
    leftover: str | None = None  # a lease beside a built step whose holder is gone
    repairs: list[str] = field(default_factory=list)

    @property
    def damage(self) -> list[FileProblem]:
        return [p for p in self.problems if p.kind != ADDED]


@dataclass
class VerifyReport:
    steps: list[StepVerification] = field(default_factory=list)

    def by_state(self, state: str) -> list[StepVerification]:
        return [s for s in self.steps if s.state == state]

    @property
    def damaged(self) -> list[StepVerification]:
        return self.by_state(DAMAGED)

    @property
    def exit_code(self) -> int:
        return 1 if self.damaged else 0

    def counts(self) -> dict[str, int]:
        return {state: len(self.by_state(state)) for state in (OK, DAMAGED, UNVERIFIED, NOT_BUILT)}

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [asdict(s) for s in self.steps], "summary": self.counts()}


# -- verifying one output folder --------------------------------------------------------------------


def _compare(output_path: str, expected: manifest.Manifest) -> list[FileProblem]:
    actual = manifest.list_outputs(output_path)
    problems: list[FileProblem] = []
    to_hash: list[str] = []
    for entry in expected.files:
        found = actual.get(entry.path)
        if found is None:
            problems.append(FileProblem(entry.path, DELETED, entry.size, None))
        elif found.size != entry.size:
            kind = TRUNCATED if found.size < entry.size else MODIFIED
            problems.append(FileProblem(entry.path, kind, entry.size, found.size))
        elif entry.xxh3_128 is not None:
            to_hash.append(entry.path)
        elif entry.crc32c is not None and found.crc32c is not None and found.crc32c != entry.crc32c:
            problems.append(FileProblem(entry.path, MODIFIED, entry.size, found.size))
    if to_hash:
        digests = manifest.hash_files(output_path, to_hash, actual)
        wanted = {e.path: e for e in expected.files}
        for rel in to_hash:
            if digests[rel] is not None and digests[rel] != wanted[rel].xxh3_128:
                problems.append(FileProblem(rel, MODIFIED, wanted[rel].size, actual[rel].size))
    known = {e.path for e in expected.files}
    problems.extend(
        FileProblem(rel, ADDED, None, stat.size) for rel, stat in sorted(actual.items()) if rel not in known
    )
    return sorted(problems, key=lambda p: (p.kind == ADDED, p.path))


def _invalidate(output_path: str) -> bool:
    """Remove the SUCCESS status so the step counts as not built; False if it changed meanwhile."""
    path = st.status_path(output_path)
    on_gcs = output_path.startswith(("gs://", "gcs://"))
    if on_gcs:
        from marinbuild.store import gcs  # lazy: gcsfs

        got = gcs.read_with_generation(path)
    else:
        got = None if (data := fs.read_bytes(path)) is None else (data, 0)
    if got is None:
        return True
    with contextlib.suppress(DamagedFileError):
        if st.parse_status(path, got[0]) == st.STATUS_RUNNING:
            return False  # a runner is rebuilding it right now
    if on_gcs:
        return gcs.delete_if_generation(path, got[1])
    fs.remove(path)
    return True


def verify_output(
    output_path: str,
    *,
    repair: bool = True,
    name: str | None = None,
    repair_metadata: bool = False,
    stale_after: float = STALE_AFTER,
) -> StepVerification:
    """Verify one step's metadata and outputs; ``repair``: invalidate it if damaged; ``repair_metadata``: tidy it."""
    result = StepVerification(output_path, NOT_BUILT, name=name)
    status = pb.read_noting(result.metadata, lambda: st.read_status(output_path))
    lease = pb.read_noting(result.metadata, lambda: lease_for(output_path, "cache-verify", stale_after).holder())
    if status == st.STATUS_SUCCESS:
        pb.read_noting(result.metadata, lambda: records.read_info(output_path))
        pb.read_noting(result.metadata, lambda: records.read_artifact(output_path))
        if lease is not None and lease.is_over(stale_after):
            result.leftover = f"lease of {lease.worker_id}, {lease.age():.0f}s old, beside a built step"
        try:
            expected = manifest.read_manifest(output_path)
        except DamagedFileError as exc:
            result.metadata.append(str(exc))
        else:
            if expected is None:
                result.state = UNVERIFIED
                result.error = "no manifest (no action-cache record): built by Marin, or outside marinbuild"
            else:
                result.files, result.bytes = len(expected.files), expected.total_bytes
                result.problems = _compare(output_path, expected)
                result.state = DAMAGED if result.damage else OK
    if result.metadata:
        result.state = DAMAGED
        result.error = result.metadata[0]
    outputs_damaged = result.state == DAMAGED and (
        result.damage or any(LEASE_FILE not in message for message in result.metadata)
    )
    if outputs_damaged and repair:
        result.invalidated = _invalidate(output_path)
        if result.invalidated:
            _leave_report(result)
    if repair_metadata:
        _repair_metadata(result, stale_after)
    return result


LEASE_FILE = st.STATUS_FILE + ".lock"


def _repair_metadata(result: StepVerification, stale_after: float) -> None:
    """Remove what cannot be read and what nobody holds: unparsable files, a leftover lease."""
    for message in result.metadata:
        path = message.split(": ", 1)[0]
        if path.endswith(LEASE_FILE):
            if remove_dead_lease(result.output_path, stale_after, unparsable=True):
                result.repairs.append(f"removed the unparsable lease {path}")
        elif not path.endswith(st.STATUS_FILE) or not result.invalidated:
            fs.remove(path)
            result.repairs.append(f"removed {path}")
    if result.leftover and remove_dead_lease(result.output_path, stale_after, unparsable=False):
        result.repairs.append(f"removed the leftover lease {lease_path(result.output_path)}")
    if fs.is_local(result.output_path):
        for name in _old_temporaries(fs.local_path(result.output_path), stale_after):
            fs.remove(os.path.join(fs.local_path(result.output_path), name))
            result.repairs.append(f"removed {name}, a temporary file left by a writer that was killed")


def _old_temporaries(folder: str, older_than: float) -> list[str]:
    """``.tmp-*`` files in ``folder`` untouched for ``older_than`` seconds: left by a process killed mid-write."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    now = time.time()
    return sorted(
        e.name
        for e in entries
        if e.name.startswith(".tmp-")
        and e.is_file(follow_symlinks=False)
        and now - e.stat(follow_symlinks=False).st_mtime > older_than
    )


def remove_dead_lease(output_path: str, stale_after: float, *, unparsable: bool) -> bool:
    """Delete the step's lease if nobody holds it (unparsable, stale, holder gone); a local one under its flock."""
    path = lease_path(output_path)

    def dead(data: bytes) -> bool:
        try:
            record = parse_lease(path, data)
        except DamagedFileError:
            return unparsable
        return record is None or record.is_over(stale_after)

    if not fs.is_local(output_path):
        data = fs.read_bytes(path)
        if data is None or not dead(data):
            return False
        fs.remove(path)
        return True
    return LocalFileLease(fs.local_path(output_path), "cache-verify", stale_after).remove_if(dead)


def _leave_report(result: StepVerification) -> None:
    report = {"invalidated": time.time(), "error": result.error, "problems": [asdict(p) for p in result.damage]}
    with contextlib.suppress(OSError):  # only an explanation: the step is already marked not built
        fs.write_atomic(fs.join(result.output_path, REPORT_FILE), json.dumps(report, indent=1).encode())


def verify_outputs(
    output_paths: Iterable[str] | Mapping[str, str],
    *,
    repair: bool = True,
    workers: int = 8,
    repair_metadata: bool = False,
    stale_after: float = STALE_AFTER,
) -> VerifyReport:
    """Verify many output folders (a mapping gives each path's step name), concurrently."""
    names: Mapping[str, str] = output_paths if isinstance(output_paths, Mapping) else {}
    paths = list(dict.fromkeys(output_paths))
    workers = max(1, min(workers, len(paths), (os.cpu_count() or 2) * 2))
    if not paths:
        return VerifyReport()
    kwargs: dict[str, Any] = {"repair": repair, "repair_metadata": repair_metadata, "stale_after": stale_after}
    with ThreadPoolExecutor(workers) as pool:
        return VerifyReport(list(pool.map(lambda p: verify_output(p, name=names.get(p), **kwargs), paths)))


def verify_cache(
    session: Any, targets: Iterable[Any], *, repair: bool = True, deps: bool = True, repair_metadata: bool = False
) -> VerifyReport:
    """Verify the targets' steps (with ``deps``, all they depend on), each labelled with its target (or its name: a step
    no label names). Damaged steps are invalidated unless ``repair`` is False (``--dry_run``)."""
    labels = pb.resolve_targets(session, targets)
    output_paths = session.engine.output_paths
    graph = StepGraph(session.engine.table) if deps else None
    named = [*labels, *session.analysis.steps_of]  # each step of a target: the first target (requested ones first)
    owner = {step: str(label) for label in reversed(named) for step in session.steps_of(label)}
    entries: dict[str, tuple[str, str | None]] = {}
    for label in labels:
        own = session.steps_of(label)
        for step in graph.blocking_closure(own) if graph is not None else own:
            entries.setdefault(output_paths[step], (step.name, owner.get(step)))
    names = {path: name for path, (name, _) in entries.items()}
    stale_after = pb.stale_after_of(session)
    report = verify_outputs(names, repair=repair, repair_metadata=repair_metadata, stale_after=stale_after)
    for step in report.steps:
        step.label = entries[step.output_path][1]
    return report


# -- text ---------------------------------------------------------------------------------------------


def _describe(problem: FileProblem) -> str:
    if problem.kind == DELETED:
        return f"{problem.kind:<10} {problem.path} (was {problem.expected_size} bytes)"
    if problem.kind == ADDED:
        return f"{problem.kind:<10} {problem.path} ({problem.actual_size} bytes, not in the manifest)"
    if problem.expected_size != problem.actual_size:
        return f"{problem.kind:<10} {problem.path} ({problem.expected_size} -> {problem.actual_size} bytes)"
    return f"{problem.kind:<10} {problem.path} (same size, different xxh3-128)"


def format_verify(report: VerifyReport) -> str:
    """One line per step (state, target or name, output path), then its problems, then a summary line."""
    lines = []
    for step in report.steps:
        lines.append(f"{step.state:<10} {step.label or step.name or ''}  {step.output_path}".rstrip())
        if step.error and step.state != OK:
            lines.append(f"           {step.error}")
        lines.extend(f"           {message}" for message in step.metadata[1:])
        lines.extend(f"           {_describe(p)}" for p in step.problems)
        if step.leftover:
            lines.append(f"           leftover   {step.leftover}")
        lines.extend(f"           -> {repair}" for repair in step.repairs)
        if step.invalidated:
            lines.append("           -> marked not built: the next build reruns it")
        elif step.state == DAMAGED and not step.repairs:
            lines.append("           -> left as it is (not repaired)")
    counts = report.counts()
    lines.append(
        f"{len(report.steps)} step(s): {counts[OK]} ok, {counts[DAMAGED]} damaged, "
        f"{counts[UNVERIFIED]} unverified (no manifest), {counts[NOT_BUILT]} not built"
    )
    return "\n".join(lines)
