"""The analysis snapshot: a no-op ``marinbuild build`` without loading or analysing anything.

Loading 10,000 targets, analysing them and computing their versions costs seconds; ninja and
Bazel answer a no-op from what the previous run recorded. So does this module. After the
analysis of a local build, the loader knows what analysis read, and ``write``
stores in ``<workspace>/.marinbuild/snapshots/`` a snapshot:

- its **key**: the marinbuild version and source, the Python interpreter, the workspace root,
  the working package, the patterns, and the settings analysis depends on (prefix, backend);
- a **signature** of every input (``(mtime_ns, size, inode)`` or "absent"), as marinbuild's
  own loader reports them (nothing is intercepted): the workspace's ``pyproject.toml``, every
  BUILD file and ``load()``ed file, every imported module's source (rules modules, experiment
  scripts, marinbuild itself, installed packages; not the standard library), every source file
  a target names with the folders above it up to its package, the code of every requested step,
  every folder the loader listed (package discovery for ``//...``, ``glob()``: a new file
  matching a glob changes its folder), and the folder of each of these files;
- the whole **environment** but the shell's own bookkeeping (``SHELL_BOOKKEEPING``: ``OLDPWD``,
  ``SHLVL``, ``_``, terminal and SSH session names, which differ between two terminals but mean
  nothing to a build) and the fault-injection variables (``FAULT_INJECTION``): rules modules and
  experiment scripts are Python and may read any variable, so the snapshot holds only while every
  other variable is unchanged;
- the **result**: each requested target's output paths, and the requested steps (name, output
  path, action-cache key) in the order the planner visits them.

``read`` gives the snapshot back only if the key and every variable match, and ``changed`` names the inputs whose
signature differs; a no-op needs none. ``statuses_if_built`` then reads the statuses of the recorded steps
(``read_statuses``, the planner's own reader, and the planner's action-cache collision check); if
every one is SUCCESS, nothing needs to run and the build flow (``marinbuild.analysis.build``)
reports the no-op exactly as a full build would. Any other answer (a changed input, a missing
or failed output, a remote prefix other than ``gs://``, the Ray backend, a snapshot that cannot be
read) takes the full path. Inputs changed within the last two seconds (or during the analysis) are not
trusted: no snapshot is written then.

What it cannot see: values analysis takes from the clock, the network, or from a file that a
rules module or an experiment script opens by itself (a data file read at import time): the
loader does not know of it. BUILD files cannot do any of these; a Python rules module or script
that does should not rely on no-op builds being detected (``marinbuild clean`` drops every
snapshot, ``--rebuild`` and ``--run_only`` bypass them).

This module owns the snapshot: its key for a command line (``key_for``), its file (``write``,
``read``), what it records of an analysis (``record_session``) and the check that its steps are
still built (``statuses_if_built``). When to look one up, write or drop it is the build flow's
decision (``marinbuild.analysis.build``). Only ``record_session`` reads a loaded and analysed
``Session``; answering a no-op needs ``key_for``, ``read``, ``changed`` and ``statuses_if_built``.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from marinbuild.analysis.session import Session, Settings
    from marinbuild.load.workspace import Workspace

__all__ = [
    "FORMAT",
    "Recorder",
    "Snapshot",
    "SnapshotKey",
    "eligible",
    "changed",
    "key_for",
    "read",
    "record_session",
    "statuses_if_built",
    "write",
]

FORMAT = 3
"""Bump when what a snapshot holds or means changes: older ones are then ignored."""
RACY_NS = 2_000_000_000
"""An input changed this recently (or during analysis) could change again unseen within one clock tick."""
KEEP = 16
"""Snapshots kept per workspace (one per distinct command line); the oldest beyond are removed."""

# Variables a shell or terminal sets per session or per command, which no analysis should depend on:
# left out of the recorded environment, so opening a new terminal does not cost the next no-op its snapshot.
SHELL_BOOKKEEPING = frozenset(
    {
        "_",
        "OLDPWD",
        "SHLVL",
        "PS1",
        "PS2",
        "COLUMNS",
        "LINES",
        "WINDOWID",
        "TERM_SESSION_ID",
        "TMUX_PANE",
        "SSH_CLIENT",
        "SSH_CONNECTION",
        "SSH_TTY",
        "SSH_AUTH_SOCK",
        "XDG_SESSION_ID",
        "DISPLAY",
    }
)


FAULT_INJECTION = frozenset({"MARINBUILD_KILL_AT_POINT", "MARINBUILD_FAULT_SIGNAL", "MARINBUILD_FAULT_POINT_LOG"})
"""Where a test asks marinbuild's own writes to stop (``marinbuild.store.faults``): read by nothing else, so left out
of the recorded environment too, and a killed build can be one that a snapshot or its rows would answer."""


def analysis_environment() -> dict[str, str]:
    """The environment as a snapshot records it: every variable but ``SHELL_BOOKKEEPING`` and ``FAULT_INJECTION``."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in SHELL_BOOKKEEPING and name not in FAULT_INJECTION
    }


_FOLDER = "snapshots"

Signature = tuple[int, int, int] | None


def signature(path: str) -> Signature:
    """``(mtime_ns, size, inode)`` of ``path``, or None if it does not exist."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _code_version() -> str:
    """marinbuild's version and where it runs from (an editable checkout changes under the same version)."""
    import marinbuild

    return f"{getattr(marinbuild, '__version__', '?')}@{os.path.dirname(marinbuild.__file__)}"


@dataclass(frozen=True)
class SnapshotKey:
    """The command line and settings one snapshot answers for."""

    root: str
    package: str
    patterns: tuple[str, ...]
    prefix: str
    backend: str

    def text(self) -> str:
        parts = [f"format={FORMAT}", _code_version(), sys.version, sys.executable, self.root, self.package,
                 self.prefix, self.backend, *self.patterns]  # fmt: skip
        return "\0".join(parts)

    def path(self, cache_dir: str | os.PathLike[str]) -> Path:
        return Path(cache_dir, _FOLDER, hashlib.sha256(self.text().encode()).hexdigest()[:24] + ".bin")


def eligible(prefix: str, backend: str) -> bool:
    """Snapshots are used with the local backend, on local and ``gs://`` prefixes (any doubt: the full path).

    On ``gs://`` the statuses are read by the planner's batched listings (``store/batch.py``), so a no-op costs a
    few requests; other fsspec protocols read a status per step and are left to the full path."""
    return backend == "local" and ("://" not in prefix or prefix.startswith(("file://", "gs://")))


def key_for(workspace: Workspace, settings: Settings, patterns: tuple[str, ...]) -> SnapshotKey | None:
    """The key of the snapshot answering ``patterns`` in the working directory, or None where snapshots are
    not used (``eligible``)."""
    from marinbuild.analysis.session import current_package

    if not eligible(settings.prefix, settings.backend):
        return None
    return SnapshotKey(
        str(workspace.root), current_package(workspace.root), tuple(patterns), settings.prefix, settings.backend
    )


@dataclass
class Snapshot:
    """What a no-op build needs: ``requested`` (label, output path) pairs and ``steps``
    (name, output path, action digest, output path overridden) in planning order.

    What an incremental build from the recorded rows (``marinbuild.analysis.rows``) needs besides: ``local``, the
    signed inputs an edit may change without a full analysis (BUILD files, their packages' folders, source files
    targets name: the loader and the source digests see those per target); ``code_files``, the code of the
    requested steps; ``build_id``, which names the build that wrote it (its rows carry the same)."""

    requested: list[tuple[str, str]]
    steps: list[tuple[str, str, str, bool]]
    local: frozenset[str] = frozenset()
    code_files: tuple[str, ...] = ()
    build_id: str = ""
    signed: tuple[tuple[str, Signature], ...] = ()

    def release(self) -> None:
        """Drop the lists (a build that wrote a new snapshot reads this one's no more, and holds it while it runs)."""
        self.requested, self.steps, self.signed = [], [], ()


# -- recording ---------------------------------------------------------------------------------


@dataclass
class Recorder:
    """Context manager around loading and analysis: when they started, and the environment they saw.

    What analysis read is what marinbuild's own loader reports (``write``'s ``inputs`` and
    ``folders``) plus every imported module's source (``module_files``): nothing is intercepted.
    The environment is recorded whole: rules modules and experiment scripts are Python, which may
    read any variable, so only an unchanged environment proves an unchanged analysis.
    Paths under ``excluded`` (the workspace's own cache folder, the prefix) are not inputs.
    ``env`` is the environment as ``read`` saw it, before the build exported anything of its own
    (``$MARINBUILD_SERVE_URL``); when not given, the environment as recording starts.
    """

    excluded: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    start_ns: int = 0

    def __enter__(self) -> Recorder:
        self.start_ns = time.time_ns()
        if self.env is None:
            self.env = analysis_environment()
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def is_input(self, path: str) -> bool:
        """Whether ``path`` (absolute) is an input: not under an excluded folder, nor compiled bytecode."""
        if "/__pycache__/" in path:
            return False  # compiled modules are covered by their sources
        return not any(path == e or path.startswith(e + os.sep) for e in self.excluded)


def module_files() -> set[str]:
    """Sources of the imported modules outside the standard library."""
    import sysconfig

    paths = sysconfig.get_paths()
    site = tuple({paths["purelib"] + os.sep, paths["platlib"] + os.sep})  # may lie inside the stdlib folder
    stdlib = tuple({paths["stdlib"] + os.sep, paths["platstdlib"] + os.sep})
    out: set[str] = set()
    for module in list(sys.modules.values()):
        filename = getattr(module, "__file__", None)
        if isinstance(filename, str) and (not filename.startswith(stdlib) or filename.startswith(site)):
            out.add(os.path.abspath(filename))
    return out


def write(
    key: SnapshotKey,
    cache_dir: str | os.PathLike[str],
    recorder: Recorder,
    inputs: Iterable[str],
    folders: Iterable[str],
    snapshot: Snapshot,
) -> str | None:
    """Store ``snapshot`` for ``key`` with the signatures of everything analysis read; its new ``build_id``, or
    None if not written.

    ``inputs`` and ``folders`` are what the loader knows it read (BUILD files, loaded files,
    source files and the folders above them) besides what ``recorder`` saw.
    """
    files = {p for p in ({os.path.abspath(p) for p in inputs} | module_files()) if recorder.is_input(p)}
    dirs = {
        p for p in {os.path.abspath(p) for p in folders} | {os.path.dirname(p) for p in files} if recorder.is_input(p)
    }
    limit = recorder.start_ns - RACY_NS
    signed: list[tuple[str, Signature]] = []
    try:
        for path in sorted(files | dirs):
            sig = signature(path)
            if sig is not None and sig[0] > limit:
                return None  # changed too recently to trust its signature
            signed.append((path, sig))
    except OSError:  # e.g. a folder we may not look into: no snapshot
        return None
    build_id = os.urandom(8).hex()
    body = (
        FORMAT,
        key.text(),
        signed,
        recorder.env if recorder.env is not None else analysis_environment(),
        snapshot.requested,
        snapshot.steps,
        sorted(snapshot.local),
        list(snapshot.code_files),
        build_id,
    )
    from marinbuild.core.private_file import write_private_file  # not at the top: a no-op from the snapshot writes none

    target = key.path(cache_dir)
    if not write_private_file(target, marshal.dumps(body)):
        return None
    _prune(target.parent)
    return build_id


@dataclass
class Inputs:
    """What the loader read for a session: ``files`` and ``folders`` to sign, and which of them are ``local``."""

    files: list[str]
    folders: set[str]
    local: set[str]


def session_inputs(session: Session) -> Inputs:
    """The files and folders ``session``'s loader read (``pyproject.toml``, BUILD and loaded files, source files
    and the folders above them up to their package, listed folders), and the local ones among them."""
    workspace = session.workspace
    assert session.loaded is not None, "load first"
    build_files = [str(workspace.build_file(p)) for p in session.loaded.packages]
    inputs = [str(workspace.root / "pyproject.toml"), *map(str, session.loader.files_read())]
    folders: set[str] = set(session.loader.folders_listed())
    local: set[str] = set(build_files)
    for package in session.loaded.packages:
        folders.add(str(workspace.package_dir(package)))
    for target in session.loaded.targets.values():
        if not target.source_paths:
            continue
        package_dir = workspace.package_dir(target.label.package)
        for path in target.source_paths:
            inputs.append(str(path))
            local.add(str(path))
            folders.update(str(parent) for parent in path.parents if parent.is_relative_to(package_dir))
    local.update(folders)
    return Inputs(inputs, folders, local)


def record_session(
    session: Session, key: SnapshotKey, recorder: Recorder, requested: list[tuple[str, str]]
) -> str | None:
    """Write the snapshot of ``session``'s analysis (loaded and analysed inside ``recorder``) for ``key``: the
    files and folders the loader read, the requested targets' ``requested`` (label, output path) pairs and
    the requested steps with their action digests and code files. Its ``build_id``, or None if not written
    (see ``write``)."""
    engine = session.engine
    assert engine is not None, "analyse first"
    read = session_inputs(session)
    if _changed_recently(recorder, (*read.files, *read.folders)):
        return None  # ``write`` would refuse it: spare the per-step work below (an edit just before a build)
    from marinbuild.code_digest import for_session

    code = for_session(session)
    steps = []
    code_files: set[str] = set()  # an edit re-checks the code; most steps share their few code files
    for step in dict.fromkeys(engine.canonicalize(s) for s in session.requested_steps()):
        code_files.update(code.code_of(step))
        overridden = step.override_output_path is not None
        digest = engine.action_digest(step)
        steps.append((step.name, engine.output_paths[step], digest, overridden))
    return write_with_code(key, session, recorder, read, Snapshot(requested, steps), code_files)


def write_with_code(
    key: SnapshotKey, session: Session, recorder: Recorder, read: Inputs, snapshot: Snapshot, code_files: set[str]
) -> str | None:
    """``write`` ``snapshot`` signed by ``read`` and the ``code_files`` (relative to the workspace root)."""
    root = session.workspace.root
    inputs = [*read.files, *(str(root / path) for path in code_files)]
    snapshot.local = frozenset(read.local)
    snapshot.code_files = tuple(sorted(code_files))
    return write(key, session.workspace.cache_dir, recorder, inputs, read.folders, snapshot)


def _changed_recently(recorder: Recorder, paths: Iterable[str]) -> bool:
    """Whether one of ``paths`` changed too recently to trust (``write``'s own rule), or cannot be looked at."""
    limit = recorder.start_ns - RACY_NS
    try:
        for path in paths:
            sig = signature(path)
            if sig is not None and sig[0] > limit:
                return True
    except OSError:
        return True
    return False


def _prune(folder: Path) -> None:
    try:
        entries = sorted(folder.glob("*.bin"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


# -- looking up --------------------------------------------------------------------------------


def read(key: SnapshotKey, cache_dir: str | os.PathLike[str]) -> Snapshot | None:
    """The snapshot for ``key`` if the environment is unchanged (its inputs are not checked here: ``changed``)."""
    try:
        data = key.path(cache_dir).read_bytes()
        fmt, text, signed, env, requested, steps, local, code_files, build_id = marshal.loads(data)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if fmt != FORMAT or text != key.text() or analysis_environment() != env:
        return None
    return Snapshot(
        [tuple(r) for r in requested],
        [tuple(s) for s in steps],
        frozenset(local),
        tuple(code_files),
        build_id,
        tuple(tuple(s) for s in signed),
    )


def changed(found: Snapshot) -> list[str] | None:
    """The recorded inputs whose signature differs now (empty: none), or None if one cannot be looked at."""
    out = []
    try:
        for path, sig in found.signed:
            if signature(path) != sig:
                out.append(path)
    except OSError:
        return None
    return out


def statuses_if_built(found: Snapshot) -> Mapping[str, str | None] | None:
    """The statuses of ``found``'s steps if every one is SUCCESS and holds the recorded action, else None.

    Read as the planner reads them (``read_statuses``, ``check_built``), so a no-op from the snapshot
    agrees with what a full build would plan. A damaged status or a path holding another action means
    None: the full path then says what is wrong."""
    from marinbuild.run.plan import read_statuses
    from marinbuild.store.action_cache import ActionKey, check_built
    from marinbuild.store.status import STATUS_SUCCESS

    paths = [path for _name, path, _digest, _overridden in found.steps]
    try:
        statuses = read_statuses(paths)
        if any(statuses.get(path) != STATUS_SUCCESS for path in paths):
            return None
        actions: Mapping[str, frozenset[str]] = getattr(statuses, "actions", {})
        # ``check_built`` of the steps whose records were not listed or are not theirs: a listed step holding no
        # record or its own (every one, in a no-op) needs no ``ActionKey`` (100,000 of them at 100,000 steps).
        check_built(
            [
                (path, ActionKey(digest, name, overridden))
                for name, path, digest, overridden in found.steps
                if (listed := actions.get(path)) is None or (listed and digest not in listed)
            ],
            actions,
        )
    except Exception:  # a damaged status, a path-hash collision...: the full path says what is wrong
        return None
    return statuses
