"""``marinbuild cache verify PATTERN``: recompute output digests and compare them with the manifests.

For each built step (status SUCCESS) of the targets, the outputs are listed and hashed again
and compared with the manifest written at commit (inside the action-cache record). A file that
is gone is *deleted*, shorter is *truncated*, longer or with another digest is *modified*; a
file the manifest does not know is *added* (reported, not damage). A status, manifest or
action record that does not parse is *damaged*, with the message naming the file.

A damaged step is then treated as not built: its ``.executor_status`` is removed (on GCS only if
it is still the generation that was verified), so the next build reruns it, as Marin would, and
what was found is left in ``.marinbuild_verify.json`` beside it (for ``why``). Its outputs are
left for the rerun to overwrite. Steps built by Marin (no manifest) are reported as
*unverified*, and left alone.

``verify_outputs(paths)`` works on output paths; ``verify_cache(session, targets)`` on targets,
as the CLI needs; ``format_verify`` and ``VerifyReport.to_dict`` render the result.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from marinbuild.store import fs, manifest
from marinbuild.store import status as st
from marinbuild.store.status import DamagedFileError

OK = "ok"
DAMAGED = "damaged"
UNVERIFIED = "unverified"
NOT_BUILT = "not built"

REPORT_FILE = ".marinbuild_verify.json"
"""Left beside a step that verify marked not built: what it found (``why`` can show it)."""

MODIFIED = "modified"
TRUNCATED = "truncated"
DELETED = "deleted"
ADDED = "added"


@dataclass
class FileProblem:
    path: str
    """Relative to the step's output folder."""
    kind: str
    expected_size: int | None = None
    actual_size: int | None = None


@dataclass
class StepVerification:
    output_path: str
    state: str
    """``ok``, ``damaged``, ``unverified`` (no manifest: built by Marin) or ``not built``."""
    name: str | None = None
    label: str | None = None
    files: int = 0
    bytes: int = 0
    problems: list[FileProblem] = field(default_factory=list)
    error: str | None = None
    """A record that does not parse (the message names the file), or why the step is unverified."""
    invalidated: bool = False
    """Its status was removed: the next build reruns it."""

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
        """1 if anything was damaged (as for a failed build), else 0."""
        return 1 if self.damaged else 0

    def to_dict(self) -> dict[str, Any]:
        return {"steps": [asdict(s) for s in self.steps],
                "summary": {state: len(self.by_state(state)) for state in (OK, DAMAGED, UNVERIFIED, NOT_BUILT)}}


# -- verifying one output folder --------------------------------------------------------------------


def _compare(output_path: str, expected: manifest.Manifest) -> list[FileProblem]:
    actual = manifest.list_outputs(output_path)
    problems: list[FileProblem] = []
    to_hash: list[str] = []
    for entry in expected.files:
        found = actual.get(entry.path)
        if found is None:
            problems.append(FileProblem(entry.path, DELETED, entry.size, None))
        elif found.size < entry.size:
            problems.append(FileProblem(entry.path, TRUNCATED, entry.size, found.size))
        elif found.size > entry.size:
            problems.append(FileProblem(entry.path, MODIFIED, entry.size, found.size))
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
    problems.extend(FileProblem(rel, ADDED, None, stat.size) for rel, stat in sorted(actual.items())
                    if rel not in known)
    return sorted(problems, key=lambda p: (p.kind == ADDED, p.path))


def _invalidate(output_path: str) -> bool:
    """Remove the SUCCESS status so the step counts as not built; False if it changed meanwhile."""
    path = st.status_path(output_path)
    if output_path.startswith(("gs://", "gcs://")):
        from marinbuild.store import gcs, metadata_cache

        got = gcs.read_with_generation(path)
        if got is None:
            return True
        try:
            if st.parse_status(path, got[0]) == st.STATUS_RUNNING:
                return False  # a runner is rebuilding it right now
        except DamagedFileError:
            pass
        removed = gcs.delete_if_generation(path, got[1])
        metadata_cache.default().forget([output_path])
        return removed
    try:
        if st.read_status(output_path) == st.STATUS_RUNNING:
            return False
    except DamagedFileError:
        pass
    fs.remove(path)
    return True


def verify_output(output_path: str, *, repair: bool = True, name: str | None = None,
                  label: str | None = None) -> StepVerification:
    """Verify one step's outputs against its manifest (and invalidate it if damaged and ``repair``)."""
    result = StepVerification(output_path, NOT_BUILT, name=name, label=label)
    try:
        if st.read_status(output_path) != st.STATUS_SUCCESS:
            return result
        expected = manifest.read_manifest(output_path)
    except DamagedFileError as exc:
        result.state, result.error = DAMAGED, str(exc)
    else:
        if expected is None:
            result.state = UNVERIFIED
            result.error = "no manifest (no action-cache record): built by Marin, or outside marinbuild"
            return result
        result.files, result.bytes = len(expected.files), expected.total_bytes
        result.problems = _compare(output_path, expected)
        result.state = DAMAGED if result.damage else OK
    if result.state == DAMAGED and repair:
        result.invalidated = _invalidate(output_path)
        if result.invalidated:
            _leave_report(result)
    return result


def _leave_report(result: StepVerification) -> None:
    report = {"invalidated": time.time(), "error": result.error,
              "problems": [asdict(p) for p in result.damage]}
    try:
        fs.write_atomic(fs.join(result.output_path, REPORT_FILE), json.dumps(report, indent=1).encode())
    except OSError:
        pass  # only an explanation: the step is already marked not built


def verify_outputs(output_paths: Iterable[str] | Mapping[str, str], *, repair: bool = True,
                   workers: int = 8) -> VerifyReport:
    """Verify many output folders (a mapping gives each path's step name), concurrently."""
    names: Mapping[str, str] = output_paths if isinstance(output_paths, Mapping) else {}
    paths = list(dict.fromkeys(output_paths))
    workers = max(1, min(workers, len(paths), (os.cpu_count() or 2) * 2))
    if not paths:
        return VerifyReport()
    with ThreadPoolExecutor(workers) as pool:
        steps = list(pool.map(lambda p: verify_output(p, repair=repair, name=names.get(p)), paths))
    return VerifyReport(steps)


def verify_cache(session: Any, targets: Iterable[Any], *, repair: bool = True) -> VerifyReport:
    """``marinbuild cache verify PATTERN...``: verify the steps of the targets PATTERN... names.

    ``targets`` are labels or patterns, resolved (loaded and analysed) as ``cache status`` does.
    Damaged steps are invalidated unless ``repair`` is False (``--dry_run``).
    """
    from marinbuild.cache import probe as pb

    labels = pb.resolve_targets(session, targets)
    output_paths = session.executor.output_paths
    entries: dict[str, tuple[str, str]] = {}
    for label in labels:
        for step in session.steps_of(label):
            entries.setdefault(output_paths[step], (step.name, str(label)))
    report = verify_outputs({path: name for path, (name, _) in entries.items()}, repair=repair)
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
        who = step.label or step.name or ""
        lines.append(f"{step.state:<10} {who}  {step.output_path}".rstrip())
        if step.error and step.state != OK:
            lines.append(f"           {step.error}")
        lines.extend(f"           {_describe(p)}" for p in step.problems)
        if step.state == DAMAGED:
            lines.append("           -> marked not built: the next build reruns it" if step.invalidated
                         else "           -> left as it is (not repaired)")
    counts = {state: len(report.by_state(state)) for state in (OK, DAMAGED, UNVERIFIED, NOT_BUILT)}
    lines.append(f"{len(report.steps)} step(s): {counts[OK]} ok, {counts[DAMAGED]} damaged, "
                 f"{counts[UNVERIFIED]} unverified (no manifest), {counts[NOT_BUILT]} not built")
    return "\n".join(lines)
