"""The package cache: each BUILD file's evaluated targets, kept between builds, so an edit re-evaluates one package.

Evaluating BUILD files is most of loading, and without this cache an incremental build evaluates
every package again after a one-line edit of one of them. With it the ``Loader`` evaluates only the
packages whose inputs changed and restores the others' targets. Kept under the complexity rule on
``bench/run.py``'s layered ``incremental`` rows (``marinbuild-cli``) and ``bench/package_cache_ab.py``,
which runs that build with and without the cache (docs/performance.md, "What was kept and why: the
complexity rule").

What a package's targets depend on, and so what an entry is keyed on, exactly as the analysis
snapshot (``marinbuild.analysis.snapshot``) judges its inputs:

- per package: the signature (``(mtime_ns, size, inode)`` or absent) of its BUILD file, of every
  file its evaluation ``load()``ed, directly or through other loaded files (``.star`` files and
  rules modules; ``Evaluator.package_inputs``), and of every folder its ``glob()`` listed;
- for all packages (the **header**, one file): marinbuild's location and the interpreter, the
  workspace root, the repository folders, the signature of ``pyproject.toml``, the environment
  but the shell's bookkeeping (rules modules are Python and may read any variable when imported),
  and the signature of the source of every module imported when an entry was written (rules
  modules import helpers; a rule's ``check`` hook runs at load time). An entry names the header it
  was written under by the header's digest; a header that changed, or whose files changed, makes
  every entry of the old one unused.

An entry is used only if every signature is unchanged; a target's rule type is found again from
its key (``defined_in%name``, as a remote worker finds it) and must be the same rule. Anything
else (a missing, unreadable, truncated or foreign entry; a changed input) means the package is
evaluated as without the cache. Inputs changed within ``RACY_NS`` before the load started (or
during it) are not trusted: no entry is written for them (the snapshot's racy-timestamp rule).
Files are written atomically (``write_private_file``: a temporary file renamed over the entry),
so a crash leaves the old entry or the new one, never a part; an entry that cannot be read back
is ignored. ``marinbuild clean`` removes them with the rest of ``.marinbuild/``.

Entries are pickles (labels, frozen dicts, structs) in the workspace's own private folder (files of
mode 0600); whoever can write there can edit the BUILD files too. A restored label is one object per
label for the whole loading session (``_LabelUnpickler``), as a label written in many packages would
otherwise be one object per mention, a copy for every dependency edge: they weigh on the peak memory of
``bench/run.py``'s layered 100,000 ``incremental`` row (``marinbuild-cli``). What is not replayed for a
restored package: ``print()`` output of its BUILD file, which is logged when a package is evaluated.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import pickle
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marinbuild.core.labels import Label, parse_label
from marinbuild.load.rules import RuleType, next_order
from marinbuild.load.target import Target
from marinbuild.load.workspace import Workspace

__all__ = ["FOLDER", "FORMAT", "PackageCache"]

FORMAT = 2
"""Bump when what an entry holds or means changes: older ones are then ignored."""
FOLDER = "packages"
_HEADER = "header.bin"

Signature = tuple[int, int, int] | None


class PackageCache:
    """The package cache of ``workspace`` (under ``workspace.cache_dir``), for one loading session."""

    def __init__(self, workspace: Workspace, repo_dirs: Mapping[str, Path] | None = None) -> None:
        self.workspace = workspace
        self.folder = Path(workspace.cache_dir) / FOLDER
        self.repo_dirs = dict(repo_dirs or {})
        self.start_ns = time.time_ns()
        self.reused: dict[str, tuple[list[str], list[str]]] = {}
        """Restored packages: the files their evaluation loaded and the folders their globs listed."""
        self._header: tuple[str, dict[str, Signature]] | None = None  # its digest and module signatures, if valid
        self._header_read = False
        self._rules: dict[str, RuleType | None] = {}
        self._labels: dict[tuple[str, str, str], Label] = {}
        """Every label restored so far, one object each (``_LabelUnpickler``)."""

    # -- reading -----------------------------------------------------------------------------------

    def restore(self, package: str) -> dict[str, Target] | None:
        """``package``'s targets as its evaluation would declare them, or None (evaluate it)."""
        header = self._valid_header()
        if header is None:
            return None
        try:
            with open(self._entry(package), "rb") as f:
                fmt, header_id, name, inputs, loads, globs, rows = _LabelUnpickler(f, self._labels).load()
        except Exception:  # missing, truncated, or naming a class that cannot be imported: evaluate
            return None
        if fmt != FORMAT or header_id != header[0] or name != package:
            return None
        from marinbuild.analysis.snapshot import signature

        try:
            if any(signature(path) != sig for path, sig in inputs):
                return None
        except OSError:
            return None
        targets: dict[str, Target] = {}
        for target_name, rule_key, attrs, site, digest in rows:
            rule = self._rule(rule_key)
            if rule is None:
                return None
            label = _interned(self._labels, package, target_name, "")
            targets[target_name] = Target(label, rule, attrs, site, (), (), (), next_order(), digest)
        self.reused[package] = (loads, globs)
        return targets

    def _valid_header(self) -> tuple[str, dict[str, Signature]] | None:
        """The header's digest and module signatures if it matches this process and every file it signs."""
        if not self._header_read:
            self._header_read = True
            try:
                data = (self.folder / _HEADER).read_bytes()
                fmt, key, env, pyproject, modules = marshal.loads(data)
            except (OSError, ValueError, EOFError, TypeError):
                return None
            from marinbuild.analysis.snapshot import analysis_environment, signature

            if fmt != FORMAT or key != self._key() or env != analysis_environment():
                return None
            try:
                if signature(str(self.workspace.root / "pyproject.toml")) != pyproject:
                    return None
                if any(signature(path) != sig for path, sig in modules.items()):
                    return None
            except OSError:
                return None
            self._header = (_digest(data), modules)
        return self._header

    def _rule(self, key: str) -> RuleType | None:
        """The rule type ``key`` names, imported as the loader imports it; None if it is not that rule any more."""
        if key not in self._rules:
            self._rules[key] = None
            from marinbuild.load.repos import resolve_load
            from marinbuild.load.trusted import import_rules_module

            file_label, _, name = key.rpartition("%")
            try:
                where = resolve_load(parse_label(file_label), self.workspace.root, self.repo_dirs)
                if where.trusted_root is not None:
                    module = import_rules_module(where.path, where.trusted_root, where.module_parts, file_label)
                    rule = getattr(module, name, None)
                    if isinstance(rule, RuleType) and rule.defined_in == file_label and rule.name == name:
                        self._rules[key] = rule
            except Exception:  # a rules module that does not import any more: its packages are evaluated
                pass
        return self._rules[key]

    # -- writing -----------------------------------------------------------------------------------

    def save(
        self,
        packages: Mapping[str, dict[str, Target]],
        evaluated: Mapping[str, tuple[list[Path], list[str]]],
        loaded: Mapping[str, dict[str, Target]] | None = None,
    ) -> int:
        """Write an entry for each package of ``packages`` that was evaluated (``evaluated``: its inputs, from
        ``Evaluator.package_inputs``) and whose inputs are old enough to trust; also for the restored ones when
        the header changed (their entries name the old one; ``loaded``: every package loaded so far, restored
        ones included, which an earlier save of the same load may have taken). Returns how many entries were
        written."""
        from marinbuild.analysis.snapshot import RACY_NS, signature

        limit = self.start_ns - RACY_NS
        old = self._valid_header()
        header_id = self._write_header(limit)
        if header_id is None:
            return 0
        from marinbuild.core.private_file import write_private_file

        todo: dict[str, tuple[list[Path], list[str]]] = {p: evaluated[p] for p in packages if p in evaluated}
        if old is None or old[0] != header_id:
            todo.update((p, ([Path(f) for f in loads], globs)) for p, (loads, globs) in self.reused.items())
        written = 0
        for package, (loads, globs) in todo.items():
            targets = packages.get(package) or (loaded or {}).get(package)
            if targets is None:  # restored, and no longer at hand: its entry is left to a later load
                continue
            files = [self.workspace.build_file(package), *loads]
            signed: list[tuple[str, Signature]] = []
            rows = []
            try:
                for path in [*map(str, files), *globs]:
                    sig = signature(path)
                    if sig is not None and sig[0] > limit:
                        raise _Untrusted
                    signed.append((path, sig))
                for name, target in targets.items():
                    rule = target.rule
                    if rule.defined_in is None or rule.name is None:
                        raise _Untrusted
                    rows.append((name, f"{rule.defined_in}%{rule.name}", target.attrs, target.site, target.digest))
                data = pickle.dumps(
                    (FORMAT, header_id, package, signed, [str(p) for p in loads], list(globs), rows), protocol=5
                )
            except (_Untrusted, OSError, pickle.PicklingError, TypeError, AttributeError):
                continue
            if write_private_file(self._entry(package), data):
                written += 1
        return written

    def _write_header(self, limit: int) -> str | None:
        """The digest of a header signing every module imported now (the valid old one if it already does)."""
        from marinbuild.analysis.snapshot import analysis_environment, module_files, signature

        old = self._valid_header()
        known = old[1] if old is not None else {}
        cache_dir = str(self.workspace.cache_dir) + os.sep
        current = {p for p in module_files() if "/__pycache__/" not in p and not p.startswith(cache_dir)}
        if old is not None and current <= known.keys():
            return old[0]
        modules = dict(known)
        try:
            for path in sorted(current - known.keys()):
                sig = signature(path)
                if sig is not None and sig[0] > limit:
                    return None
                modules[path] = sig
            pyproject = signature(str(self.workspace.root / "pyproject.toml"))
        except OSError:
            return None
        if pyproject is not None and pyproject[0] > limit:
            return None
        from marinbuild.core.private_file import write_private_file

        data = marshal.dumps((FORMAT, self._key(), analysis_environment(), pyproject, modules))
        if not write_private_file(self.folder / _HEADER, data):
            return None
        self._header = (_digest(data), modules)
        return self._header[0]

    # -- names -------------------------------------------------------------------------------------

    def _key(self) -> str:
        import marinbuild

        repos = [f"{k}={v}" for k, v in sorted(self.repo_dirs.items())]
        parts = [f"format={FORMAT}", os.path.dirname(marinbuild.__file__), sys.version, sys.executable,
                 str(self.workspace.root), *repos]  # fmt: skip
        return "\0".join(parts)

    def _entry(self, package: str) -> Path:
        return self.folder / (hashlib.sha256(package.encode()).hexdigest()[:24] + ".bin")

    def reused_files(self) -> list[str]:
        """The files the restored packages' evaluations loaded (inputs of the analysis snapshot too)."""
        return [path for loads, _globs in self.reused.values() for path in loads]

    def reused_folders(self) -> list[str]:
        return [folder for _loads, globs in self.reused.values() for folder in globs]


class _Untrusted(Exception):
    """An input too recent to trust, or a target that cannot be written."""


def _interned(labels: dict[tuple[str, str, str], Label], package: str, name: str, repo: str = "") -> Label:
    """The one ``Label(package, name, repo)`` of ``labels``, made and added if new."""
    key = (package, name, repo)
    label = labels.get(key)
    if label is None:
        label = labels[key] = Label(package, name, repo)
    return label


class _LabelUnpickler(pickle.Unpickler):
    """``pickle.load`` whose labels (pickled as ``Label(package, name, repo)``, ``Label.__reduce__``) come from
    ``labels``: one object per label, however many packages mention it."""

    def __init__(self, file: Any, labels: dict[tuple[str, str, str], Label]) -> None:
        super().__init__(file)
        self._labels = labels

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        if found is Label:
            labels = self._labels
            return lambda package, name, repo="": _interned(labels, package, name, repo)
        return found


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:24]
