"""Recorded rows: what a build keeps of each step, so that the next build after an edit analyses, versions and
plans only the edited targets and the targets that depend on them.

An edit to one BUILD attribute changes the versions of one target and of its consumers, but a full build
analyses, versions and plans every target and writes every step's entry of Marin's run-info file again: its cost
follows the graph, not the change. After a build that wrote a run info, ``record`` keeps beside its analysis
snapshot (``marinbuild.analysis.snapshot``), in ``<snapshot>.rows``:

- one **row** per step of the run info, in its order (Marin's: dependencies before consumers): the step's name,
  output path, action digest, whether its output path is overridden, the full md5 of its version string, its depth
  (how many levels of dependencies it has), where its entry lies in the run-info file (offset, length), and the
  signature of its status file when it said SUCCESS (``store.status.success_signature``: the next build checks
  the step with one ``stat``; none when unknown, and the status is read);
- per analysed target: the rows of its steps, the labels of its dependencies (in order) and the digest of its
  declaration (``Target.digest``: its rule and attribute values);
- the requested labels, the run-info file and its signature ``(mtime_ns, size, inode)``, and the ``build_id`` of
  the snapshot written by the same build (rows belong to that snapshot only);
- the md5 states saved while the run-info file was hashed (``store.run_info_splice.EntryHasher``), where the
  next splice of it resumes hashing.

What the next build does with them is ``marinbuild.analysis.incremental``'s. Rows are only recorded for graphs
they describe exactly: every step belongs to a target (no step that only a config refers to) and none is a
pseudo-dependency. Anything else, a missing or damaged file, a run-info file that changed since: no rows, and
the next build takes the full path. ``marinbuild clean`` drops them with the snapshots.
"""

from __future__ import annotations

import marshal
import os
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild.analysis.snapshot import Signature, SnapshotKey, signature

if TYPE_CHECKING:
    from marinbuild.analysis.session import Session
    from marinbuild.store.status import StatusSignature

__all__ = ["FORMAT", "LabelTable", "Row", "RowTable", "Rows", "load", "path_for", "record", "sign_statuses", "write"]

FORMAT = 5
"""Bump when what the rows hold or mean changes: older files are then ignored."""

Row = tuple[str, str, str, bool, str, int, int, int]
"""(name, output path, action digest, output path overridden, version md5 hex, depth, entry offset, entry length)."""

LabelRow = tuple[tuple[int, ...], tuple[str, ...], str]
"""(its steps' row indices, in ``steps_of`` order; its dependencies' labels, in order; its declaration digest, empty
if unknown)."""


class RowTable(Sequence[Row]):
    """The rows, kept compact (one build reads all of them and holds them while its steps run: digests as raw
    bytes, output paths only where they are not ``<prefix>/<name>-<md5[:6]>``); ``table[i]`` is a ``Row``."""

    def __init__(self, prefix: str, rows: Sequence[Row] = ()):
        self.prefix_slash = prefix if prefix.endswith("/") else prefix + "/"
        self.names: list[str] = []
        self.paths: dict[int, str] = {}
        digests, md5s, flags = bytearray(), bytearray(), bytearray()
        depths, spans = array("q"), array("q")
        for i, (name, path, digest, overridden, md5, depth, start, length) in enumerate(rows):
            self.names.append(name)
            if path != self.prefix_slash + name + "-" + md5[:6]:
                self.paths[i] = path
            digests += bytes.fromhex(digest)
            md5s += bytes.fromhex(md5)
            flags.append(overridden)
            depths.append(depth)
            spans.extend((start, length))
        self.digests, self.md5s, self.flags = bytes(digests), bytes(md5s), bytes(flags)
        self.depths, self.spans = depths, spans
        self.statuses = array("q", bytes(24 * len(self.names)))
        self._all_paths: list[str] | None = None

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, i: int) -> Row:  # type: ignore[override]
        name = self.names[i]
        md5 = self.md5s[16 * i : 16 * i + 16].hex()
        path = self.paths.get(i) or self.prefix_slash + name + "-" + md5[:6]
        digest = self.digests[32 * i : 32 * i + 32].hex()
        return name, path, digest, bool(self.flags[i]), md5, self.depths[i], self.spans[2 * i], self.spans[2 * i + 1]

    def name(self, i: int) -> str:
        return self.names[i]

    def path(self, i: int) -> str:
        return self.paths.get(i) or self.prefix_slash + self.names[i] + "-" + self.md5s[16 * i : 16 * i + 3].hex()

    def all_paths(self) -> list[str]:
        """Every row's output path, in order (made once: a build from rows reads each several times)."""
        made = self._all_paths
        if made is None:
            made = self._all_paths = [self.path(i) for i in range(len(self.names))]
        return made

    def digest(self, i: int) -> str:
        return self.digests[32 * i : 32 * i + 32].hex()

    def md5_raw(self, i: int) -> bytes:
        return self.md5s[16 * i : 16 * i + 16]

    def status_signature(self, i: int) -> StatusSignature | None:
        """The signature of row ``i``'s status file when it said SUCCESS, if recorded."""
        mtime, inode, size = self.statuses[3 * i : 3 * i + 3]
        return (mtime, inode, size) if mtime else None

    def unsigned(self, indices: Iterable[int], status_file: str) -> list[int] | None:
        """The rows of ``indices`` whose status file has no recorded signature, or no longer the recorded one (one
        ``stat`` of ``<output path>/<status_file>`` per signed row); None if a signed row's status file is gone."""
        statuses, paths, stat = self.statuses, self.all_paths(), os.stat
        suffix = "/" + status_file
        out = []
        for i in indices:
            mtime = statuses[3 * i]
            if mtime:
                path = paths[i]
                try:  # ``fs.local_path`` inlined: one call fewer per row
                    st = stat((path[7:] if path.startswith("file://") else path) + suffix)
                except OSError:
                    return None
                if st.st_mtime_ns == mtime and st.st_ino == statuses[3 * i + 1] and st.st_size == statuses[3 * i + 2]:
                    continue
            out.append(i)
        return out

    def set_status_signature(self, i: int, signature: StatusSignature | None) -> None:
        self.statuses[3 * i : 3 * i + 3] = array("q", signature or (0, 0, 0))

    def replaced(self, new: Mapping[int, Row], spans: Sequence[tuple[int, int]]) -> RowTable:
        """These rows with ``new`` rows at their indices and every entry at ``spans`` (a new run-info file)."""
        table = RowTable.__new__(RowTable)
        table.prefix_slash = self.prefix_slash
        table.names, table.paths = list(self.names), dict(self.paths)
        digests, md5s, flags = bytearray(self.digests), bytearray(self.md5s), bytearray(self.flags)
        table.depths = array("q", self.depths)
        table.statuses = array("q", self.statuses)
        table._all_paths = None
        for i, (name, path, digest, overridden, md5, depth, _start, _length) in new.items():
            table.names[i] = name
            table.paths.pop(i, None)
            if path != self.prefix_slash + name + "-" + md5[:6]:
                table.paths[i] = path
            digests[32 * i : 32 * i + 32] = bytes.fromhex(digest)
            md5s[16 * i : 16 * i + 16] = bytes.fromhex(md5)
            flags[i] = overridden
            table.depths[i] = depth
            table.statuses[3 * i : 3 * i + 3] = array("q", (0, 0, 0))
        table.digests, table.md5s, table.flags = bytes(digests), bytes(md5s), bytes(flags)
        table.spans = array("q", (x for span in spans for x in span))
        if len(table.spans) != 2 * len(table.names):
            raise ValueError("a span per row")
        return table

    def dump(self) -> tuple[object, ...]:
        return (
            self.prefix_slash,
            self.names,
            self.paths,
            self.digests,
            self.md5s,
            self.flags,
            self.depths.tobytes(),
            self.spans.tobytes(),
            self.statuses.tobytes(),
        )

    @classmethod
    def undump(cls, data: tuple[object, ...]) -> RowTable:
        prefix_slash, names, paths, digests, md5s, flags, depths, spans, statuses = data
        table = cls.__new__(cls)
        table.prefix_slash = str(prefix_slash)
        table.names, table.paths = list(names), dict(paths)  # type: ignore[call-overload]
        table.digests, table.md5s, table.flags = bytes(digests), bytes(md5s), bytes(flags)  # type: ignore[call-overload]
        table.depths, table.spans = array("q"), array("q")
        table.depths.frombytes(depths)  # type: ignore[arg-type]
        table.spans.frombytes(spans)  # type: ignore[arg-type]
        table.statuses = array("q")
        table.statuses.frombytes(statuses)  # type: ignore[arg-type]
        table._all_paths = None
        n = len(table.names)
        if len(table.digests) != 32 * n or len(table.md5s) != 16 * n or len(table.flags) != n:
            raise ValueError("rows of different lengths")
        if len(table.depths) != n or len(table.spans) != 2 * n or len(table.statuses) != 3 * n:
            raise ValueError("rows of different lengths")
        return table


class LabelTable(Mapping[str, LabelRow]):
    """label -> ``LabelRow``, kept compact: dependencies as positions among the labels, digests as raw bytes."""

    def __init__(self, labels: Mapping[str, LabelRow] | None = None):
        self.keys_: list[str] = list(labels or ())
        self.position = {name: i for i, name in enumerate(self.keys_)}
        self.rows, self.row_ends = array("q"), array("q")
        self.deps, self.dep_ends = array("q"), array("q")
        digests = bytearray()
        for name in self.keys_:
            indices, deps, digest = (labels or {})[name]
            self.rows.extend(indices)
            self.row_ends.append(len(self.rows))
            self.deps.extend(self.position[d] for d in deps)
            self.dep_ends.append(len(self.deps))
            digests += bytes.fromhex(digest) if digest else bytes(20)
        self.digests = bytes(digests)

    def __len__(self) -> int:
        return len(self.keys_)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys_)

    def __contains__(self, name: object) -> bool:
        return name in self.position

    def __getitem__(self, name: str) -> LabelRow:
        i = self.position[name]
        rows = tuple(self.rows[self.row_ends[i - 1] if i else 0 : self.row_ends[i]])
        keys = self.keys_
        deps = tuple(keys[d] for d in self.deps[self.dep_ends[i - 1] if i else 0 : self.dep_ends[i]])
        raw = self.digests[20 * i : 20 * i + 20]
        return rows, deps, raw.hex() if any(raw) else ""

    def rows_of(self, name: str) -> tuple[int, ...]:
        """The row indices of the steps of target ``name``."""
        i = self.position[name]
        return tuple(self.rows[self.row_ends[i - 1] if i else 0 : self.row_ends[i]])

    def digest_of(self, name: str) -> str:
        i = self.position[name]
        raw = self.digests[20 * i : 20 * i + 20]
        return raw.hex() if any(raw) else ""

    def dependents(self, names: Iterable[str]) -> set[str]:
        """``names`` and every target depending on one of them, directly or not."""
        position, keys, deps, ends = self.position, self.keys_, self.deps, self.dep_ends
        users: list[list[int]] = [[] for _ in keys]
        start = 0
        for i, end in enumerate(ends):
            for d in deps[start:end]:
                users[d].append(i)
            start = end
        seen = {position[name] for name in names}
        todo = list(seen)
        while todo:
            for user in users[todo.pop()]:
                if user not in seen:
                    seen.add(user)
                    todo.append(user)
        return {keys[i] for i in seen}

    def with_digests(self, digests: Mapping[str, str]) -> LabelTable:
        """These labels with the declaration digests ``digests`` (label -> digest) in place of theirs."""
        table = LabelTable.__new__(LabelTable)
        table.keys_, table.position = self.keys_, self.position
        table.rows, table.row_ends, table.deps, table.dep_ends = self.rows, self.row_ends, self.deps, self.dep_ends
        raw = bytearray(self.digests)
        for name, digest in digests.items():
            i = self.position[name]
            raw[20 * i : 20 * i + 20] = bytes.fromhex(digest) if digest else bytes(20)
        table.digests = bytes(raw)
        return table

    def dump(self) -> tuple[object, ...]:
        parts = (self.rows, self.row_ends, self.deps, self.dep_ends)
        return (self.keys_, *(a.tobytes() for a in parts), self.digests)

    @classmethod
    def undump(cls, data: tuple[object, ...]) -> LabelTable:
        keys, rows, row_ends, deps, dep_ends, digests = data
        table = cls.__new__(cls)
        table.keys_ = list(keys)  # type: ignore[call-overload]
        table.position = {name: i for i, name in enumerate(table.keys_)}
        table.rows, table.row_ends, table.deps, table.dep_ends = (array("q") for _ in range(4))
        for target, raw in zip(
            (table.rows, table.row_ends, table.deps, table.dep_ends), (rows, row_ends, deps, dep_ends), strict=True
        ):
            target.frombytes(raw)  # type: ignore[arg-type]
        table.digests = bytes(digests)  # type: ignore[call-overload]
        n = len(table.keys_)
        if len(table.row_ends) != n or len(table.dep_ends) != n or len(table.digests) != 20 * n:
            raise ValueError("labels of different lengths")
        return table


@dataclass
class Rows:
    build_id: str
    run_info: str
    run_info_signature: Signature
    requested: list[str]
    rows: RowTable
    labels: LabelTable
    md5_states: list[tuple[int, bytes]] = field(default_factory=list)
    """Saved md5 states of the run-info file, (entries hashed, state) (``store.run_info_splice.EntryHasher``): none
    where OpenSSL's MD5 functions are not at hand."""


def path_for(key: SnapshotKey, cache_dir: str | os.PathLike[str]) -> Path:
    return key.path(cache_dir).with_suffix(".rows")


def write(key: SnapshotKey, cache_dir: str | os.PathLike[str], rows: Rows) -> bool:
    from marinbuild.core.private_file import write_private_file

    requested = array("q", (rows.labels.position[name] for name in rows.requested)).tobytes()
    body = (
        FORMAT,
        rows.build_id,
        rows.run_info,
        rows.run_info_signature,
        requested,
        rows.rows.dump(),
        rows.labels.dump(),
        rows.md5_states,
    )
    return write_private_file(path_for(key, cache_dir), marshal.dumps(body))  # type: ignore[arg-type]


def load(key: SnapshotKey, cache_dir: str | os.PathLike[str], build_id: str) -> Rows | None:
    """The rows written with the snapshot ``build_id``, if their run-info file is unchanged; else None."""
    try:
        fmt, found_id, run_info, run_info_sig, requested, rows, labels, md5_states = marshal.loads(
            path_for(key, cache_dir).read_bytes()
        )
        if fmt != FORMAT or found_id != build_id or not build_id:
            return None
        if signature(run_info) != tuple(run_info_sig):
            return None
        label_table = LabelTable.undump(labels)
        positions = array("q")
        positions.frombytes(requested)
        names = [label_table.keys_[i] for i in positions]
        saved = [(int(index), bytes(state)) for index, state in md5_states]
        return Rows(build_id, run_info, tuple(run_info_sig), names, RowTable.undump(rows), label_table, saved)
    except (OSError, ValueError, EOFError, TypeError, IndexError):
        return None


def drop(key: SnapshotKey, cache_dir: str | os.PathLike[str]) -> None:
    path_for(key, cache_dir).unlink(missing_ok=True)


def sign_statuses(table: RowTable, indices: Iterable[int]) -> None:
    """Record the status signature of each row in ``indices`` whose status says SUCCESS now (and not too recently:
    ``store.status.success_signature``)."""
    import time

    from marinbuild.store.status import success_signature

    now = time.time_ns()
    for i in indices:
        table.set_status_signature(i, success_signature(table.path(i), now))


def record(
    session: Session,
    key: SnapshotKey,
    build_id: str,
    run_info: str,
    spans: list[tuple[int, int]],
    states: list[tuple[int, bytes]] | None = None,
) -> bool:
    """Write the rows of ``session``'s full analysis and run: ``run_info`` is the run-info file the run wrote (a
    local path), ``spans`` each entry's (offset, length) there, in the version table's step order, and ``states``
    the md5 states a splice of it resumes from. False (and no file) when the graph is one rows cannot describe
    (see the module docstring)."""
    engine, analysis, loaded = session.engine, session.analysis, session.loaded
    assert engine is not None and analysis is not None and loaded is not None
    table = engine.table
    steps = table.steps
    if len(spans) != len(steps) or any(table.is_pseudo_dep[s] for s in steps):
        drop(key, session.workspace.cache_dir)
        return False
    index = {step: i for i, step in enumerate(steps)}
    md5s = table.full_md5s()
    labels: dict[str, LabelRow] = {}
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
    requested = [str(label) for label in session.labels]
    row_table = RowTable(table.prefix, rows)
    sign_statuses(row_table, range(len(row_table)))
    try:
        found = Rows(build_id, run_info, sig, requested, row_table, LabelTable(labels), list(states or ()))
    except KeyError:  # a dependency that is not an analysed target: the rows would not describe the graph
        drop(key, session.workspace.cache_dir)
        return False
    return write(key, session.workspace.cache_dir, found)
