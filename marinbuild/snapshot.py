"""The analysis snapshot: a no-op ``marinbuild build`` without loading or analysing anything.

Loading 10,000 targets, analysing them and computing their versions costs seconds; ninja and
Bazel answer a no-op from what the previous run recorded. So does this module. After the
analysis of a local build, ``Recorder`` has seen everything that analysis read, and ``write``
stores in ``<workspace>/.marinbuild/snapshots/`` a snapshot:

- its **key**: the marinbuild version and source, the Python interpreter, the workspace root,
  the working package, the patterns, and the settings analysis depends on (prefix, backend);
- a **signature** of every input (``(mtime_ns, size, inode)`` or "absent"): the workspace's
  ``pyproject.toml``, every BUILD file and ``load()``ed file, every file opened for reading
  (rules data, a script's configs), every imported module's source (rules modules, experiment
  scripts, marinbuild itself, installed packages; not the standard library), every source file
  a target names with the folders above it up to its package, every folder listed (package
  discovery for ``//...``, ``glob()``: a new file matching a glob changes its folder), and the
  folder of each of these files;
- every **environment variable** analysis read (its value, or "unset"); if analysis iterated
  over the environment, all of it;
- the **result**: each requested target's output paths, and the requested steps (name, output
  path, action-cache key) in the order the planner visits them.

``lookup`` gives the snapshot back only if the key matches and every signature and variable
is unchanged. The CLI then reads the statuses of the recorded steps (``read_statuses``, the
planner's own reader, and the planner's action-cache collision check); if every one is
SUCCESS, nothing needs to run and it reports the no-op exactly as a full build would. Any
other answer (a changed input, a missing or failed output, a remote prefix, the Ray backend,
a snapshot that cannot be read) takes the full path. Inputs changed within the last two
seconds (or during the analysis) are not trusted: no snapshot is written then.

What it cannot see: values analysis takes from the clock, the network, or from an
environment variable read through a reference to ``os.environ`` taken before the build
started (``from os import environ``). BUILD files cannot do any of these; a Python experiment
script that does should not rely on no-op builds being detected (``marinbuild clean`` drops
every snapshot).
"""

from __future__ import annotations

import hashlib
import marshal
import os
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["FORMAT", "Recorder", "Snapshot", "SnapshotKey", "eligible", "lookup", "write"]

FORMAT = 1
"""Bump when what a snapshot holds or means changes: older ones are then ignored."""
RACY_NS = 2_000_000_000
"""An input changed this recently (or during analysis) could change again unseen within one clock tick."""
KEEP = 16
"""Snapshots kept per workspace (one per distinct command line); the oldest beyond are removed."""
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
    """Snapshots are used for local prefixes and the local backend only (any doubt: the full path)."""
    return backend == "local" and ("://" not in prefix or prefix.startswith("file://"))


@dataclass
class Snapshot:
    """What a no-op build needs: ``requested`` (label, output path) pairs and ``steps``
    (name, output path, action digest, output path overridden) in planning order."""

    requested: list[tuple[str, str]]
    steps: list[tuple[str, str, str, bool]]


# -- recording ---------------------------------------------------------------------------------


class _Active:
    recorder: Recorder | None = None
    hooked = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    recorder = _Active.recorder
    if recorder is None:
        return
    try:  # an exception here would break the audited operation itself
        if event == "open":
            path, mode, flags = args
            if isinstance(mode, str):
                if any(c in mode for c in "wax+"):
                    return
            elif isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
                return
            recorder.saw_file(path)
        elif event in ("os.listdir", "os.scandir"):
            recorder.saw_folder(args[0] if args else None)
    except Exception as exc:  # noqa: BLE001 - anything odd: this analysis is not snapshotted
        recorder.untracked.append(f"{event}: {exc}")


class _RecordingEnviron(type(os.environ)):  # type: ignore[misc]
    """``os.environ`` while recording: the same variables, noting which ones are read."""

    def __init__(self, base: Any, recorder: Recorder) -> None:  # noqa: D107 - shares base's storage
        self.__dict__.update(base.__dict__)
        self._recorder = recorder

    def __getitem__(self, key: str) -> str:
        self._recorder.env_read.add(key)
        return super().__getitem__(key)

    def __iter__(self) -> Iterator[str]:
        self._recorder.env_all = True
        return super().__iter__()

    def __len__(self) -> int:
        self._recorder.env_all = True
        return super().__len__()


@dataclass
class Recorder:
    """Context manager around loading and analysis: notes the files, folders and variables they read.

    Paths under ``excluded`` (the workspace's own cache folder, the prefix) are not inputs.
    """

    excluded: tuple[str, ...] = ()
    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    env_read: set[str] = field(default_factory=set)
    env_all: bool = False
    untracked: list[str] = field(default_factory=list)
    """Reads that could not be tied to a path (e.g. by file descriptor): no snapshot then."""
    start_ns: int = 0
    _environ: Any = None
    _env_before: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> Recorder:
        if not _Active.hooked:
            sys.addaudithook(_audit)  # stays for the process; returns at once when nothing records
            _Active.hooked = True
        self.start_ns = time.time_ns()
        self._env_before = dict(os.environ)
        self._environ = os.environ
        os.environ = _RecordingEnviron(os.environ, self)  # noqa: B003 - same variables; os.getenv reads it too
        _Active.recorder = self
        return self

    def __exit__(self, *exc: object) -> None:
        _Active.recorder = None
        if self._environ is not None:
            os.environ = self._environ  # noqa: B003 - the original object back

    def _normal(self, path: Any) -> str | None:
        if path is None:
            path = "."
        if isinstance(path, int):
            self.untracked.append(f"file descriptor {path}")
            return None
        try:
            text = os.fsdecode(os.fspath(path))
        except TypeError:
            self.untracked.append(repr(path))
            return None
        full = os.path.abspath(text)
        if full.startswith(("/proc/", "/dev/", "/sys/")) or "/__pycache__/" in full:
            return None  # compiled modules are covered by their sources (sys.modules)
        if any(full == e or full.startswith(e + os.sep) for e in self.excluded):
            return None
        return full

    def saw_file(self, path: Any) -> None:
        full = self._normal(path)
        if full is not None:
            self.files.add(full)

    def saw_folder(self, path: Any) -> None:
        full = self._normal(path)
        if full is not None:
            self.folders.add(full)

    def environment(self) -> tuple[bool, dict[str, str | None]]:
        """``(all, variables)``: the variables read (as they were before analysis), or all of them."""
        if self.env_all:
            return True, dict(self._env_before)
        return False, {k: self._env_before.get(k) for k in sorted(self.env_read)}


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
) -> bool:
    """Store ``snapshot`` for ``key`` with the signatures of everything analysis read; False if not written.

    ``inputs`` and ``folders`` are what the loader knows it read (BUILD files, loaded files,
    source files and the folders above them) besides what ``recorder`` saw.
    """
    if recorder.untracked:
        return False
    files = set(recorder.files) | {os.path.abspath(p) for p in inputs} | module_files()
    dirs = set(recorder.folders) | {os.path.abspath(p) for p in folders} | {os.path.dirname(p) for p in files}
    limit = recorder.start_ns - RACY_NS
    signed: list[tuple[str, Signature]] = []
    try:
        for path in sorted(files | dirs):
            sig = signature(path)
            if sig is not None and sig[0] > limit:
                return False  # changed too recently to trust its signature
            signed.append((path, sig))
    except OSError:  # e.g. a folder we may not look into: no snapshot
        return False
    env_all, env = recorder.environment()
    body = (FORMAT, key.text(), signed, env_all, env, snapshot.requested, snapshot.steps)
    from marinbuild.core.private_file import write_private_file  # not at the top: a no-op from the snapshot writes none

    target = key.path(cache_dir)
    if not write_private_file(target, marshal.dumps(body)):
        return False
    _prune(target.parent)
    return True


def _prune(folder: Path) -> None:
    try:
        entries = sorted(folder.glob("*.bin"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


# -- looking up --------------------------------------------------------------------------------


def lookup(key: SnapshotKey, cache_dir: str | os.PathLike[str]) -> Snapshot | None:
    """The snapshot for ``key`` if every input it recorded is unchanged, else None."""
    try:
        data = key.path(cache_dir).read_bytes()
        fmt, text, signed, env_all, env, requested, steps = marshal.loads(data)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if fmt != FORMAT or text != key.text():
        return None
    if env_all:
        if dict(os.environ) != env:
            return None
    else:
        get = os.environ.get
        if any(get(name) != value for name, value in env.items()):
            return None
    try:
        for path, sig in signed:
            if signature(path) != sig:
                return None
    except OSError:
        return None
    return Snapshot([tuple(r) for r in requested], [tuple(s) for s in steps])
