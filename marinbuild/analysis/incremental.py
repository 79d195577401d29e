"""An incremental build from the recorded rows: analyse, version and plan only the edited targets and their
consumers; take every other step as the previous build recorded it.

When the analysis snapshot (``marinbuild.analysis.snapshot``) of a command line no longer holds only because
of **local** inputs (a BUILD file, a package's folder, a source file a target names), a full build would
analyse, version and plan every target again and compose every entry of Marin's run-info file, though only the
edited targets and their consumers can differ. ``prepare_partial`` and ``prepare`` do the part that can differ
and take the rest from the rows the previous build recorded (``marinbuild.analysis.rows``):

1. ``prepare_partial``, when only BUILD files changed: the loader evaluates those packages alone. A target
   added, removed or given other dependencies there is another graph. The other packages' inputs did not change,
   so their targets are the recorded ones. ``prepare``, otherwise: the loader has loaded the patterns (unchanged
   packages restored from the package cache), and the requested labels, the analysed targets and each one's
   dependencies (in order) must be the recorded ones. Either way the graph is the same, so Marin's step order is
   the recorded one.
2. **Edited** targets: those whose declaration (rule and attribute values: ``Target.digest``, which the package
   cache keeps for restored packages) differs from the recorded one, and those naming a changed source file.
   **Affected**: the edited ones and every target depending on them (``prepare_partial`` then loads only the
   packages holding affected targets).
3. Every other step must still be built (SUCCESS and holding its recorded action, read as the planner reads
   them). The affected targets are analysed with their unaffected dependencies given as stand-in steps, each
   taken into the version table as recorded: one that consumers inline with its version from its own
   ``.executor_info`` (checked against the recorded md5 of its version string), a deeper one, which consumers
   name ``name-hash``, with its recorded md5. Consumers' versions, paths and ``.executor_info`` texts are then
   composed exactly as a full build composes them.
4. The affected steps must take the recorded steps' places one for one, with versions no other step has.

The run then plans and runs the affected steps (the engine reads their dependencies' statuses as usual). The run
info is the previous file's entries with the new entries in their places, in the recorded order: the same bytes a
full build writes. A child process starts copying and hashing the kept entries as soon as step 2 knows them
(``marinbuild.store.run_info_splice``), while steps 3 and 4 go on; step 4 sends it the new entries, so that it
hashes the rest of the file while the run plans and runs.

``prepare`` answers None whenever any of this does not hold (and the build takes the full path, with the
session already loaded): another graph, a step no longer built, a stand-in whose record does not match, a rule
whose ``analyze`` hook reads a dependency's step (``NeedsFullAnalysis``), a changed input that is not local
(``pyproject.toml``, a module, a loaded ``.star`` file, the code of a step), or most of the graph affected.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from marinbuild.analysis.analyze import NeedsFullAnalysis, analyze, run_target
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.versions import MAX_INLINE_DEPTH

if TYPE_CHECKING:
    from marinbuild.analysis.rows import Rows
    from marinbuild.analysis.session import Session
    from marinbuild.analysis.snapshot import Snapshot
    from marinbuild.core.labels import Label
    from marinbuild.engine import Engine
    from marinbuild.load.loader import LoadedWorkspace
    from marinbuild.load.target import Target

__all__ = ["MOST", "Prepared", "RecordedConfig", "prepare", "prepare_partial"]

MOST = 0.5
"""Above this share of the graph affected, the full path is taken: it does the same work with fewer checks."""


@dataclass(frozen=True)
class RecordedConfig:
    """The config of a stand-in step: the previous build's record of a built target (never run or walked)."""

    label: str


@dataclass
class Prepared:
    """What ``prepare`` found: ``order`` is each row's step now (a new step for an affected row, else the row's
    index), ``run`` the affected steps to plan and run, ``clean`` the rows taken as recorded."""

    rows: Rows
    order: list[ExecutorStep | int]
    run: list[ExecutorStep]
    clean: list[int]
    digests: dict[str, str]
    """The declaration digest of each affected target now (the rows record the others' as they were)."""
    analysed: int
    """How many targets were analysed (the affected ones)."""


def prepare(session: Session, found: Snapshot, changed: list[str], rows: Rows, splice: bool) -> Prepared | None:
    """Analyse and version the affected targets of ``session`` (loaded) on top of ``rows``; None: take the full
    path (see the module docstring). On success ``session.analysis`` and ``session.engine`` hold the affected
    targets' analysis and an engine with their steps and stand-ins versioned, ready to run ``Prepared.run``.
    ``splice``: start writing the run info from the kept entries as soon as they are known (not for a dry run)."""
    loaded = session.loaded
    assert loaded is not None, "load first"
    if any(path not in found.local for path in changed):
        return None
    if [str(label) for label in session.labels] != rows.requested:
        return None
    closure = loaded.closure(session.labels)
    if len(closure) != len(rows.labels):
        return None
    targets = loaded.targets
    names: dict[Label, str] = {}
    for label in closure:
        name = str(label)
        recorded = rows.labels.get(name)
        if recorded is None or tuple(str(d) for d in targets[label].deps) != recorded[1]:
            return None
        names[label] = name
    edited = _edited(closure, targets, names, rows, set(changed))
    by_name = {name: label for label, name in names.items()}
    affected = {by_name[name] for name in rows.labels.dependents(names[label] for label in edited)}
    if len(affected) > MOST * len(closure):
        return None
    return _finish(session, loaded, rows, affected, names, [label for label in closure if label in affected], splice)


def prepare_partial(session: Session, found: Snapshot, changed: list[str], rows: Rows, splice: bool) -> Prepared | None:
    """``prepare`` for an edit of BUILD files only, loading only the packages the edit affects: the edited packages
    (evaluated) and those holding a target that depends on an edited target (mostly restored from the package
    cache); the others are as the rows record them, since none of their inputs changed. None: ``prepare`` decides
    after a load of every package. Call it on a session that has loaded nothing."""
    workspace = session.workspace
    packages: dict[str, list[str]] = {}
    for name in rows.labels:
        if not name.startswith("//"):  # a target of another repository: ``prepare`` looks at it
            return None
        packages.setdefault(name[2 : name.index(":")], []).append(name)
    by_build_file = {str(workspace.build_file(package)): package for package in packages}
    edited_packages = set()
    for path in changed:
        package = by_build_file.get(path)
        if package is None:  # a folder, a source file...: what it changes is found by loading everything
            return None
        edited_packages.add(package)
    loaded = session.loader.load_packages(sorted(edited_packages), transitive=False)
    targets = loaded.targets
    names: dict[Label, str] = {}
    edited: set[str] = set()
    for package in edited_packages:
        here = list(loaded.packages.get(package, ()))
        if sorted(str(label) for label in here) != sorted(packages[package]):
            return None  # a target added, removed or renamed: another graph
        for label in here:
            name = names[label] = str(label)
            _indices, deps, digest = rows.labels[name]  # a few: the edited packages' targets
            target = targets[label]
            if tuple(str(d) for d in target.deps) != deps:
                return None
            if not target.digest or target.digest != digest:
                edited.add(name)
    affected_names = rows.labels.dependents(edited)
    if len(affected_names) > MOST * len(rows.labels):
        return None
    needed = {name[2 : name.index(":")] for name in affected_names} - edited_packages
    loaded = session.loader.load_packages(sorted(needed), transitive=False)
    targets = loaded.targets
    by_name = {str(label): label for package in needed | edited_packages for label in loaded.packages.get(package, [])}
    if any(name not in by_name for name in affected_names):
        return None
    affected = {by_name[name] for name in affected_names}
    for label in affected:
        names[label] = str(label)
    for label in affected:
        for dependency in targets[label].deps:
            names.setdefault(dependency, str(dependency))
    stop = [label for label in names if label not in affected]
    order = loaded.closure(sorted(affected, key=str), stop=stop)
    session.labels = []
    return _finish(session, loaded, rows, affected, names, order, splice)


def _finish(
    session: Session,
    loaded: LoadedWorkspace,
    rows: Rows,
    affected: set[Label],
    names: dict[Label, str],
    closure_order: list[Label],
    splice: bool,
) -> Prepared | None:
    """From the affected targets on: the other steps still built, the affected ones analysed and versioned on
    top of their stand-in dependencies, each in its recorded place (steps 3 and 4 of the module docstring).
    ``names``: the text of each affected target's label and of its dependencies'; ``closure_order``: the affected
    targets, dependencies first; ``splice``: start the run info's write from the kept entries now
    (``Engine.splice_run_info``; not for a dry run, which writes none)."""
    affected_rows = {i for label in affected for i in rows.labels.rows_of(names[label])}
    clean = [i for i in range(len(rows.rows)) if i not in affected_rows]
    engine = session.make_engine()
    if splice:  # the kept entries are copied and hashed while the rest of the build goes on
        spans = rows.rows.spans
        slots = [None if i in affected_rows else (spans[2 * i], spans[2 * i + 1]) for i in range(len(rows.rows))]
        if engine.splice_run_info(rows.run_info, slots, rows.md5_states) is None:
            return None
    prepared = None
    try:
        prepared = _analyse(session, engine, loaded, rows, affected, names, closure_order, clean)
    finally:
        if prepared is None:
            engine.abandon_splice()
    return prepared


def _analyse(
    session: Session,
    engine: Engine,
    loaded: LoadedWorkspace,
    rows: Rows,
    affected: set[Label],
    names: dict[Label, str],
    closure_order: list[Label],
    clean: list[int],
) -> Prepared | None:
    """``_finish`` from the check of the clean rows on, with the engine made."""
    targets = loaded.targets
    if not _built(rows, clean):
        return None
    stand_ins = _stand_ins(rows, names, affected, targets)
    if stand_ins is None:
        return None
    from marinbuild.load import StatCache

    cache = StatCache(session.workspace.stat_cache_path)
    roots = closure_order
    try:
        analysis = analyze(loaded, roots, session.workspace, cache, known=stand_ins)
    except NeedsFullAnalysis:
        return None
    cache.save()
    table = engine.table  # no version-digest cache: reading it costs more than hashing the affected steps' versions
    try:
        for label, step in stand_ins.items():
            (index,) = rows.labels.rows_of(names[label])
            _n, path, digest, _o, md5, depth, _s, _l = rows.rows[index]
            inlined = depth <= MAX_INLINE_DEPTH  # consumers inline its version; a deeper one they name
            version = _recorded_version(path) if inlined else None
            table.add_recorded(step, version, md5=md5, depth=depth, output_path=path, action_digest=digest)
    except (OSError, ValueError, KeyError, TypeError):  # no readable record, or not the recorded version
        return None
    new_steps = [step for label in roots for step in analysis.steps_of[label]]
    engine.add_all(new_steps)
    order: list[ExecutorStep | int] = list(range(len(rows.rows)))
    placed: dict[int, ExecutorStep] = {}
    for label in roots:
        indices = rows.labels.rows_of(names[label])
        steps = [table.canonicalize(s) for s in analysis.steps_of[label]]
        if len(steps) != len(indices):
            return None
        for index, step in zip(indices, steps, strict=True):
            if placed.setdefault(index, step) is not step or step in table.recorded:
                return None
    md5s = table.full_md5s()
    clean_md5 = {rows.rows.md5_raw(i) for i in clean}
    if len(set(placed.values())) != len(placed) or any(bytes.fromhex(md5s[s]) in clean_md5 for s in placed.values()):
        return None  # two rows now one version, or a new version equal to a recorded one: Marin's list changes
    for index, step in placed.items():
        order[index] = step
    if len(table.steps) != len(placed) + len(stand_ins):  # a new step no row stands for
        return None
    session.loaded = loaded
    session.analysis = analysis
    session.engine = engine
    if engine.spliced_run_info is not None:
        engine.splice_steps([placed[i] for i in sorted(placed)])
    digests = {names[label]: targets[label].digest for label in affected}
    return Prepared(rows, order, list(placed.values()), clean, digests, len(roots))


def _edited(
    closure: list[Label], targets: Mapping[Label, Target], names: dict[Label, str], rows: Rows, changed: set[str]
) -> set[Label]:
    """Targets whose declaration is not the recorded one (or unknown), and targets naming a changed source file."""
    edited = set()
    for label in closure:
        target = targets[label]
        recorded = rows.labels.digest_of(names[label])
        if not target.digest or target.digest != recorded or any(str(p) in changed for p in target.source_paths):
            edited.add(label)
    return edited


def _built(rows: Rows, clean: list[int]) -> bool:
    """Whether every clean row is SUCCESS and holds its recorded action: one ``stat`` for a row whose status file
    has its recorded signature (it still says SUCCESS, and nothing built there since), else as the planner reads
    it (the status, then the action record)."""
    from marinbuild.run.plan import read_statuses
    from marinbuild.store.action_cache import ActionKey, check_built
    from marinbuild.store.status import STATUS_FILE, STATUS_SUCCESS

    table = rows.rows
    unsigned = table.unsigned(clean, STATUS_FILE)
    if unsigned is None:
        return False
    clean = unsigned
    all_paths = table.all_paths()
    paths = [all_paths[i] for i in clean]
    try:
        statuses = read_statuses(paths)
        if any(statuses.get(path) != STATUS_SUCCESS for path in paths):
            return False
        keys = [ActionKey(table.digest(i), table.names[i], bool(table.flags[i])) for i in clean]
        check_built(zip(paths, keys, strict=True), getattr(statuses, "actions", {}))
    except Exception:  # a damaged status, another version at a path...: the full path says what is wrong
        return False
    return True


def _stand_ins(
    rows: Rows, names: dict[Label, str], affected: set[Label], targets: Mapping[Label, Target]
) -> dict[Label, ExecutorStep] | None:
    """A stand-in step for each unaffected dependency of an affected target (one step each, as a dependency must
    be), named and placed as recorded."""
    out: dict[Label, ExecutorStep] = {}
    for label in affected:
        for dep in targets[label].deps:
            if dep in affected or dep in out:
                continue
            indices = rows.labels.rows_of(names[dep])
            if len(indices) != 1:
                return None
            name, path, _digest, overridden, *_ = rows.rows[indices[0]]
            out[dep] = ExecutorStep(
                name=name,
                fn=run_target,
                config=RecordedConfig(names[dep]),
                override_output_path=path if overridden else None,
            )
    return out


def _recorded_version(output_path: str) -> dict[str, object]:
    """The version a built step's ``.executor_info`` records (keys in the order they were written)."""
    with open(os.path.join(output_path, ".executor_info"), "rb") as f:
        version = json.loads(f.read())["version"]
    if not isinstance(version, dict):
        raise ValueError(f"{output_path}/.executor_info: no version")
    return version
