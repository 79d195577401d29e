"""Caching checked and compiled dialect files, in memory and on disk, keyed by ``(path, mtime_ns, size)``.

Parsing, checking and compiling a file costs far more than running it, so the result is
kept in memory for the process and, when a cache folder is given (the loader uses
``<workspace>/.marinbuild/compiled``), marshalled to disk like a ``.pyc``: a later process
loading an unchanged file skips the parse entirely. Entries record the Python bytecode
magic and ``CHECKER_VERSION``, so a new interpreter or new checks redo them. Files changed
within the last two seconds are not written to disk, because a second change in the same
clock tick could leave their stat unchanged.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import tempfile
import time
from pathlib import Path

from marinbuild.load.dialect import CHECKER_VERSION, CompiledFile, LoadStatement, compile_source

__all__ = ["clear_memory_cache", "compile_file"]

_MEMORY: dict[str, tuple[tuple[int, int], CompiledFile]] = {}
_TAG = (importlib.util.MAGIC_NUMBER, CHECKER_VERSION)
_RACY_NS = 2_000_000_000


def clear_memory_cache() -> None:
    _MEMORY.clear()


def compile_file(
    path: str | os.PathLike[str], display: str | None = None, cache_dir: str | os.PathLike[str] | None = None
) -> CompiledFile:
    """The checked and compiled file at ``path`` (``display`` is its path in error messages)."""
    key = os.fspath(path)
    st = os.stat(key)
    stamp = (st.st_mtime_ns, st.st_size)
    shown = display if display is not None else key
    hit = _MEMORY.get(key)
    if hit is not None and hit[0] == stamp and hit[1].display == shown:
        return hit[1]
    disk = Path(cache_dir, hashlib.sha1(key.encode()).hexdigest() + ".bin") if cache_dir is not None else None
    compiled = _read(disk, key, stamp, shown) if disk is not None else None
    if compiled is None:
        compiled = compile_source(Path(key).read_bytes(), key, shown)
        if disk is not None and time.time_ns() - st.st_mtime_ns > _RACY_NS:
            _write(disk, key, stamp, compiled)
    _MEMORY[key] = (stamp, compiled)
    return compiled


def _read(disk: Path, key: str, stamp: tuple[int, int], shown: str) -> CompiledFile | None:
    try:
        tag, path, cached_stamp, code, loads = marshal.loads(disk.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        return None
    if tag != _TAG or path != key or tuple(cached_stamp) != stamp:
        return None
    return CompiledFile(
        key, shown, code, tuple(LoadStatement(lbl, tuple(map(tuple, sym)), ln, col) for lbl, sym, ln, col in loads)
    )


def _write(disk: Path, key: str, stamp: tuple[int, int], compiled: CompiledFile) -> None:
    loads = tuple((s.label, s.symbols, s.line, s.col) for s in compiled.loads)
    write_private_file(disk, marshal.dumps((_TAG, key, stamp, compiled.code, loads)))


def write_private_file(target: Path, data: bytes) -> bool:
    """Atomically write a file of marinbuild's own under ``<workspace>/.marinbuild/`` (its folder made on first
    use, with a ``.gitignore`` of ``*``). False if the disk refuses: a cache that cannot be written only costs speed."""
    try:
        if not target.parent.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            (target.parent / ".gitignore").write_text("*\n")
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".bin")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    return True
