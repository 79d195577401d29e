"""The code each step runs, recorded with its output, and whether it changed since that output was built.

A step's code is its Python files with xxh3-128 digests: a rule target's ``code`` files, or a Marin step's ``fn`` file
when inside the workspace (paths relative to its root). ``record`` writes ``<output_path>/.marinbuild_code.json`` for
each step that succeeded. ``CodeChanges`` tells for many steps at once "code changed since this output was built:
<file>" (``why``, ``cache status``, ``stale()``, the summary; a gone file counts as changed; no record, nothing to say).
On GCS the deterministic ``record_bytes(code)`` makes a listing's md5 (``batch.read_md5s``) tell whether a record
differs; only those are read. A file whose digest is in the step's key cannot differ for a built output."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from marinbuild.core.placeholders import VersionedValue
from marinbuild.load.sources import StatCache, hash_source_file
from marinbuild.store import batch, fs

__all__ = [
    "CODE_RECORD",
    "CodeChanges",
    "display_path",
    "file_digest",
    "for_session",
    "record",
    "record_bytes",
    "sentence",
    "step_code",
]

CODE_RECORD = ".marinbuild_code.json"


def display_path(path: str | os.PathLike[str], root: Path, stat_cache: Any = None) -> str:
    """``path`` relative to the workspace ``root`` when inside it, else absolute (resolved once with ``stat_cache``)."""
    if stat_cache is not None:
        return stat_cache.display_path(path, root)
    resolved = Path(path).resolve()
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(resolved)


def file_digest(path: str | os.PathLike[str], stat_cache: Any = None) -> str | None:
    """The file's content digest; None when it cannot be read."""
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


def record_bytes(code: dict[str, str]) -> bytes:
    """The record of ``code``: the same bytes for the same code, so its md5 tells whether a record holds it."""
    return json.dumps({"files": code}, sort_keys=True).encode()


def record(output_path: str, code: dict[str, str]) -> None:
    """Write the record of the code an output was built with (nothing when the step has no known code)."""
    if not code:
        return
    fs.write_atomic(fs.join(output_path, CODE_RECORD), record_bytes(code))


def _parse(data: bytes | None) -> dict[str, str] | None:
    try:
        files = json.loads(data)["files"] if data is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    return files if isinstance(files, dict) else None


def _differ(was: dict[str, str] | None, code: dict[str, str]) -> list[str]:
    return sorted(path for path, digest in was.items() if code.get(path) != digest) if was else []


class CodeChanges:
    """Changed code of many built outputs: ``check(steps)`` answers the steps whose code changed, ``of(step)`` one.
    ``check`` keeps only the set of steps checked and the changes found (a table of every step's code held 100,000 dicts
    at the peak of a 100,000-step build). Local records are read one after the other; GCS ones compared by listed md5.
    """

    def __init__(self, root: Path, output_paths: Mapping[Any, str], stat_cache: Any = None):
        """``root``: the workspace root; ``output_paths``: the engine's; ``stat_cache``: the build's, if any."""
        self.root = root
        self.output_paths = output_paths
        self.stat_cache = stat_cache
        self.found: dict[Any, list[str]] = {}  # The steps checked whose code changed, with the files.
        self.checked: set[Any] = set()
        self._code: dict[int, tuple[Any, dict[str, str], bytes]] = {}  # a code dict or fn: it, its code, its record

    def check(self, steps: Iterable[Any]) -> dict[Any, list[str]]:
        """``{step: changed files}`` of the (built) ``steps`` whose code changed since their output was built."""
        output_paths = self.output_paths
        answer: dict[Any, list[str]] = {}
        remote: list[tuple[Any, dict[str, str]]] = []
        for s in steps:
            if s in self.checked:
                if s in self.found:
                    answer[s] = self.found[s]
                continue
            self.checked.add(s)
            _, code, expected = self._known(s)
            if not code:
                continue
            path = output_paths[s]
            if not fs.is_local(path):
                remote.append((s, code))
                continue
            try:
                data = fs.read_bytes(fs.join(path, CODE_RECORD))
            except OSError:  # not readable: nothing to say
                continue
            if data != expected and (files := _differ(_parse(data), code)):
                self.found[s] = answer[s] = files
        if remote:
            listed = batch.read_md5s([output_paths[s] for s, _ in remote], CODE_RECORD)
            to_read = []
            for s, code in remote:
                path = output_paths[s]
                if path not in listed:  # not on GCS: no md5 to compare
                    to_read.append((s, code))
                elif listed[path] is not None and listed[path] != batch.md5_of(record_bytes(code)):
                    to_read.append((s, code))  # the code changed: its record names the files that did
            records = batch.read_many([fs.join(output_paths[s], CODE_RECORD) for s, _ in to_read])
            for (s, code), data in zip(to_read, records, strict=True):
                files = _differ(_parse(data), code)
                if files:
                    self.found[s] = answer[s] = files
        return answer

    def code_of(self, step: Any) -> dict[str, str]:
        return self._known(step)[1]

    def _known(self, step: Any) -> tuple[Any, dict[str, str], bytes]:
        """``step``'s code and the bytes of its record, made once for the steps sharing a ``code`` dict or an fn."""
        code = getattr(step.config, "code", None)
        key = code if isinstance(code, dict) else step.fn  # a rule target's files are in its config
        known = self._code.get(id(key))
        if known is None or known[0] is not key:
            made = step_code(step, self.root, self.stat_cache)
            known = self._code[id(key)] = (key, made, record_bytes(made))
        return known

    def of(self, step: Any) -> list[str]:
        """The changed files of ``step`` ([] for none); each step is checked once per session."""
        return self.check([step]).get(step, [])


def for_session(session: Any) -> CodeChanges:
    """The session's ``CodeChanges`` (one per session, so each output is checked once)."""
    found = getattr(session, "_code_changes", None)
    if found is None:
        found = CodeChanges(
            session.workspace.root, session.engine.output_paths, StatCache(session.workspace.stat_cache_path)
        )
        session._code_changes = found
    return found


def sentence(files: list[str]) -> str:
    """The one wording every command uses."""
    return f"code changed since this output was built: {', '.join(files)}"
