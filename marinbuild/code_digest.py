"""The code each step runs, recorded with its output, and whether it changed since that output was built.

A step's code is the set of Python files that define what it does, each with its xxh3-128 content
digest (the stat cache of ``marinbuild.load.sources`` keeps a file from being read twice):

- a target of a rule (``TargetConfig``): the files analysis put in its ``code`` (the rule's module;
  for ``python_step`` also the module of ``fn``);
- a step of a Marin script: the file defining its ``fn``, when that file is inside the workspace.

Paths are relative to the workspace root when inside it, else absolute.

Contract:
- ``record(output_path, code)`` writes ``<output_path>/.marinbuild_code.json`` (``{"files": {path: digest}}``);
  the build flow (``marinbuild.analysis.build``) calls it for each step a build ran successfully.
- ``changed(output_path, code)`` lists the files whose digest differs from the record (a file gone
  counts as changed); no record (built before code was recorded, or by Marin) means nothing to say.
- ``CodeChanges`` answers, for many steps at once, the sentence ``why``, ``cache status``, query's
  ``stale()`` and the build summary print: "code changed since this output was built: <file>". For local
  outputs it reads each record through the workspace's ledger (``marinbuild.code_digest_ledger``): a record
  unchanged since the last check is not read again.
A file whose digest is part of the step's key (``python_step``'s ``fn`` module, by default) cannot
differ for a built output, whose path holds that key; only the other files can.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marinbuild.code_digest_ledger import Ledger

__all__ = [
    "CODE_RECORD",
    "CodeChanges",
    "changed",
    "display_path",
    "file_digest",
    "for_session",
    "record",
    "sentence",
    "step_code",
]

CODE_RECORD = ".marinbuild_code.json"


def display_path(path: str | os.PathLike[str], root: Path, stat_cache: Any = None) -> str:
    """``path`` relative to the workspace ``root`` when inside it, else absolute. With the build's ``stat_cache``
    (``marinbuild.load.StatCache``), each path is resolved once per build."""
    if stat_cache is not None:
        return stat_cache.display_path(path, root)
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(resolved)


def file_digest(path: str | os.PathLike[str], stat_cache: Any = None) -> str | None:
    """The file's content digest; None when it cannot be read."""
    from marinbuild.load.sources import hash_source_file

    try:
        return hash_source_file(path, stat_cache)
    except OSError:
        return None


def _defining_file(fn: Any) -> str | None:
    target = inspect.unwrap(fn) if callable(fn) else None
    try:
        return inspect.getsourcefile(target) if target is not None else None
    except TypeError:  # a builtin, or a callable object without source
        return None


def step_code(step: Any, root: Path, stat_cache: Any = None) -> dict[str, str]:
    """``{path: digest}`` of the code ``step`` runs (see the module docstring)."""
    from marinbuild.core.placeholders import VersionedValue

    config = step.config
    code = getattr(config, "code", None)
    if isinstance(code, dict):  # a rule target: analysis recorded its files
        out = {}
        for entry in code.values():
            value = entry.value if isinstance(entry, VersionedValue) else entry
            out[value["path"]] = value["xxh3"]
        return out
    path = _defining_file(step.fn)
    resolve = stat_cache.resolve if stat_cache is not None else (lambda p: Path(p).resolve())
    if path is None or not resolve(path).is_relative_to(resolve(root)):
        return {}
    digest = file_digest(path, stat_cache)
    return {display_path(path, root, stat_cache): digest} if digest is not None else {}


def record(output_path: str, code: dict[str, str]) -> None:
    """Write the record of the code an output was built with (nothing when the step has no known code)."""
    if not code:
        return
    from marinbuild.store import fs

    fs.write_atomic(fs.join(output_path, CODE_RECORD), json.dumps({"files": code}, sort_keys=True).encode())


def _recorded(output_path: str) -> dict[str, str] | None:
    from marinbuild.store import fs

    try:
        data = fs.read_bytes(fs.join(output_path, CODE_RECORD))
    except OSError:
        return None
    return _parse(data)


def _parse(data: bytes | None) -> dict[str, str] | None:
    try:
        files = json.loads(data)["files"] if data is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    return files if isinstance(files, dict) else None


def _differ(was: dict[str, str] | None, code: dict[str, str]) -> list[str]:
    if not was:
        return []
    return sorted(path for path, digest in was.items() if code.get(path) != digest)


def changed(output_path: str, code: dict[str, str], ledger: Ledger | None = None) -> list[str]:
    """The recorded files whose digest is not ``code``'s now (sorted); [] without a record. With a ``ledger``
    (``marinbuild.code_digest_ledger.Ledger``; local outputs only), a record unchanged since it was last read is
    not read again."""
    return _differ(_recorded_through(ledger, output_path) if ledger is not None else _recorded(output_path), code)


def _recorded_through(ledger: Ledger, output_path: str) -> dict[str, str] | None:
    from marinbuild.store import fs

    record_path = fs.local_path(fs.join(output_path, CODE_RECORD))
    known, files = ledger.lookup(record_path)
    if not known:
        files = _recorded(output_path)
        ledger.remember(record_path, files)
    return files


class CodeChanges:
    """Changed code of many built outputs, read in parallel: ``of(step)`` after ``check(steps)``."""

    def __init__(self, session: Any):
        from marinbuild.load import StatCache

        self.session = session
        self.root = session.workspace.root
        self.stat_cache = StatCache(session.workspace.stat_cache_path)
        self.found: dict[Any, list[str]] = {}
        self._ledger: Ledger | None = None

    def check(self, steps: Iterable[Any]) -> dict[Any, list[str]]:
        """``{step: changed files}`` for ``steps`` (built ones: the caller knows which)."""
        engine = self.session.engine
        todo = [s for s in dict.fromkeys(steps) if s not in self.found]
        codes = {s: step_code(s, self.root, self.stat_cache) for s in todo}
        with_code = [s for s in todo if codes[s]]
        for s in todo:
            self.found[s] = []
        if with_code:
            from marinbuild.store import fs
            from marinbuild.store.batch import read_many

            if all(fs.is_local(engine.output_paths[s]) for s in with_code):  # a thread per read costs more here
                from marinbuild.code_digest_ledger import Ledger

                if self._ledger is None:  # one per session: read once, and a save keeps every output it saw
                    self._ledger = Ledger(self.session.workspace.cache_dir)
                ledger = self._ledger
                self.found.update((s, changed(engine.output_paths[s], codes[s], ledger)) for s in with_code)
                ledger.save()
            else:
                records = read_many([fs.join(engine.output_paths[s], CODE_RECORD) for s in with_code])
                found = (_differ(_parse(data), codes[s]) for s, data in zip(with_code, records, strict=True))
                self.found.update(zip(with_code, found, strict=True))
        return {s: self.found[s] for s in dict.fromkeys(steps)}

    def code_of(self, step: Any) -> dict[str, str]:
        """``step_code`` of ``step`` now."""
        return step_code(step, self.root, self.stat_cache)

    def of(self, step: Any) -> list[str]:
        """The changed files of ``step``, from the last ``check`` that saw it (an empty list too), else checked now."""
        found = self.found.get(step)
        return found if found is not None else self.check([step])[step]


def for_session(session: Any) -> CodeChanges:
    """The session's ``CodeChanges`` (one per session, so each output's record is read once)."""
    found = getattr(session, "_code_changes", None)
    if found is None:
        found = CodeChanges(session)
        session._code_changes = found
    return found


def sentence(files: list[str]) -> str:
    """The one wording every command uses."""
    return f"code changed since this output was built: {', '.join(files)}"
