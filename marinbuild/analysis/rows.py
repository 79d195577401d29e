"""Recorded rows: what a build keeps of each step, so that the next build after an edit analyses, versions and
plans only the edited targets and the targets that depend on them.

An edit to one BUILD attribute changes the versions of one target and of its consumers, but a full build
analyses, versions and plans every target and writes every step's entry of Marin's run-info file again: its cost
follows the graph, not the change. After a build that wrote a run info, ``record`` keeps beside its analysis
snapshot (``marinbuild.analysis.snapshot``), in ``<snapshot>.rows``:

- one **row** per step of the run info, in its order (Marin's: dependencies before consumers): the step's name,
  output path, action digest, whether its output path is overridden, the full md5 of its version string, its depth
  (how many levels of dependencies it has), and where its entry lies in the run-info file (offset, length);
- per analysed target: the rows of its steps, the labels of its dependencies (in order) and the digest of its
  declaration (``Target.digest``: its rule and attribute values);
- the requested labels, the run-info file and its signature ``(mtime_ns, size, inode)``, and the ``build_id`` of
  the snapshot written by the same build (rows belong to that snapshot only).

What the next build does with them is ``marinbuild.analysis.incremental``'s. Rows are only recorded for graphs
they describe exactly: every step belongs to a target (no step that only a config refers to) and none is a
pseudo-dependency. Anything else, a missing or damaged file, a run-info file that changed since: no rows, and
the next build takes the full path. ``marinbuild clean`` drops them with the snapshots.
"""

from __future__ import annotations

import marshal
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild.analysis.snapshot import Signature, SnapshotKey, signature

if TYPE_CHECKING:
    from marinbuild.analysis.session import Session

__all__ = ["FORMAT", "Row", "Rows", "load", "path_for", "record", "write"]

FORMAT = 2
"""Bump when what the rows hold or mean changes: older files are then ignored."""

Row = tuple[str, str, str, bool, str, int, int, int]
"""(name, output path, action digest, output path overridden, version md5 hex, depth, entry offset, entry length)."""


@dataclass
class Rows:
    build_id: str
    run_info: str
    run_info_signature: Signature
    requested: list[str]
    rows: list[Row]
    labels: dict[str, tuple[tuple[int, ...], tuple[str, ...], str]]
    """label -> (its steps' row indices, in ``steps_of`` order; its dependencies' labels, in order; the digest of
    its declaration, empty if unknown)."""


def path_for(key: SnapshotKey, cache_dir: str | os.PathLike[str]) -> Path:
    return key.path(cache_dir).with_suffix(".rows")


def write(key: SnapshotKey, cache_dir: str | os.PathLike[str], rows: Rows) -> bool:
    from marinbuild.core.private_file import write_private_file

    body = (
        FORMAT,
        rows.build_id,
        rows.run_info,
        rows.run_info_signature,
        rows.requested,
        rows.rows,
        rows.labels,
    )
    return write_private_file(path_for(key, cache_dir), marshal.dumps(body))


def load(key: SnapshotKey, cache_dir: str | os.PathLike[str], build_id: str) -> Rows | None:
    """The rows written with the snapshot ``build_id``, if their run-info file is unchanged; else None."""
    try:
        fmt, found_id, run_info, run_info_sig, requested, rows, labels = marshal.loads(
            path_for(key, cache_dir).read_bytes()
        )
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if fmt != FORMAT or found_id != build_id or not build_id:
        return None
    try:
        if signature(run_info) != tuple(run_info_sig):
            return None
    except (OSError, TypeError):
        return None
    return Rows(build_id, run_info, tuple(run_info_sig), list(requested), [tuple(r) for r in rows], dict(labels))


def drop(key: SnapshotKey, cache_dir: str | os.PathLike[str]) -> None:
    path_for(key, cache_dir).unlink(missing_ok=True)


def record(session: Session, key: SnapshotKey, build_id: str, run_info: str, spans: list[tuple[int, int]]) -> bool:
    """Write the rows of ``session``'s full analysis and run: ``run_info`` is the run-info file the run wrote (a
    local path) and ``spans`` each entry's (offset, length) there, in the version table's step order. False
    (and no file) when the graph is one rows cannot describe (see the module docstring)."""
    engine, analysis, loaded = session.engine, session.analysis, session.loaded
    assert engine is not None and analysis is not None and loaded is not None
    table = engine.table
    steps = table.steps
    if len(spans) != len(steps) or any(table.is_pseudo_dep[s] for s in steps):
        drop(key, session.workspace.cache_dir)
        return False
    index = {step: i for i, step in enumerate(steps)}
    md5s = table.full_md5s()
    labels: dict[str, tuple[tuple[int, ...], tuple[str, ...], str]] = {}
    covered: set[int] = set()
    for label, label_steps in analysis.steps_of.items():
        indices = tuple(index[table.canonicalize(s)] for s in label_steps)
        covered.update(indices)
        target = loaded.targets[label]
        labels[str(label)] = (indices, tuple(str(d) for d in target.deps), target.digest)
    if len(covered) != len(steps):  # a step no target stands for: rows would not know whose it is
        drop(key, session.workspace.cache_dir)
        return False
    rows: list[Row] = [
        (
            step.name,
            table.output_paths[step],
            table.action_digest(step),
            step.override_output_path is not None,
            md5s[step],
            table.depth[step],
            start,
            length,
        )
        for step, (start, length) in zip(steps, spans, strict=True)
    ]
    sig = signature(run_info)
    if sig is None:
        return False
    found = Rows(build_id, run_info, sig, [str(label) for label in session.labels], rows, labels)
    return write(key, session.workspace.cache_dir, found)
