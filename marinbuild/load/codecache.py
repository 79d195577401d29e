"""Caching checked and compiled dialect files, in memory and on disk, keyed by ``(path, mtime_ns, size)``.

Parsing, checking and compiling a file costs far more than running it, so the result is
kept in memory for the process and, when a cache folder is given (the loader uses
``<workspace>/.marinbuild/compiled``), marshalled to disk like a ``.pyc``: a later process
loading an unchanged file skips the parse entirely. All the files of one cache folder share
one pack file, ``files.bin`` (a marshalled dict from source path to ``(mtime_ns, size,
marshalled code and load() statements)``): a first load of 100 BUILD files then creates one
file, not 100, which on this project's VM saved 30-90 ms of a 0.5 s load, and a later load
opens one file. The pack is read once and read again only when its stat changes; new entries
are written by ``flush()``, which the loader calls at the end of every load (and ``atexit``
for other callers), merged with what other processes wrote meanwhile; entries whose file is
gone or changed are dropped then. The pack records the Python bytecode magic and
``CHECKER_VERSION``, so a new interpreter or new checks redo it. Files changed within the
last two seconds are not written to disk, because a second change in the same clock tick
could leave their stat unchanged.
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import marshal
import os
import threading
import time
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING

from marinbuild.load.dialect import CHECKER_VERSION, CompiledFile, LoadStatement, compile_source

if TYPE_CHECKING:
    from marinbuild.load.prefetch import CompileHelper

__all__ = ["PACK_NAME", "clear_memory_cache", "compile_file", "encode", "flush", "uncached_size"]

PACK_NAME = "files.bin"
_MEMORY: dict[str, tuple[tuple[int, int], CompiledFile]] = {}
_TAG = (importlib.util.MAGIC_NUMBER, CHECKER_VERSION)
_RACY_NS = 2_000_000_000
_SEQUENCE = itertools.count()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)

Entry = tuple[int, int, bytes]
"""A file's ``(mtime_ns, size, marshal.dumps((code, load statements)))``."""


class _Pack:
    """The entries of one cache folder: as last read from its pack file, plus those not yet written."""

    def __init__(self, folder: str) -> None:
        self.file = os.path.join(folder, PACK_NAME)
        self.disk_stamp: tuple[int, int, int] | None = None  # (mtime_ns, size, inode) of the file read
        self.entries: dict[str, Entry] = {}
        self.fresh: dict[str, Entry] = {}  # added by this process since the last flush

    def refresh(self) -> None:
        """Read the pack file again if it changed since it was read (one ``stat``)."""
        try:
            st = os.stat(self.file)
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp != self.disk_stamp:
            self.entries = {**_read_pack(self.file), **self.fresh}
            self.disk_stamp = stamp

    def add(self, key: str, entry: Entry) -> None:
        global _flush_registered
        self.entries[key] = self.fresh[key] = entry
        if not _flush_registered:
            _flush_registered = True
            atexit.register(flush)

    def write(self) -> None:
        """Write the fresh entries, merged with the pack on disk now; drop entries of changed or deleted files."""
        fresh, self.fresh = self.fresh, {}
        merged = _read_pack(self.file)
        for key, (mtime_ns, size, _blob) in list(merged.items()):
            if key not in fresh:
                try:
                    st = os.stat(key)
                except OSError:
                    del merged[key]
                    continue
                if st.st_mtime_ns != mtime_ns or st.st_size != size:
                    del merged[key]
        merged.update(fresh)
        if write_private_file(Path(self.file), marshal.dumps((_TAG, merged))):
            try:
                st = os.stat(self.file)
                self.disk_stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
            except OSError:
                self.disk_stamp = None
        self.entries = {**merged, **self.fresh}  # entries added meanwhile by another thread stay fresh


_PACKS: dict[str, _Pack] = {}
_LOCK = threading.Lock()
_flush_registered = False


def _read_pack(file: str) -> dict[str, Entry]:
    try:
        with open(file, "rb") as fh:
            tag, entries = marshal.loads(fh.read())
    except (OSError, ValueError, EOFError, TypeError):
        return {}
    if tag != _TAG or type(entries) is not dict:
        return {}
    for key, entry in entries.items():
        if type(key) is not str or type(entry) is not tuple or len(entry) != 3:
            return {}  # damaged: start again
    return entries


def clear_memory_cache() -> None:
    """Forget what this process compiled or read from disk (entries not yet written are dropped)."""
    _MEMORY.clear()
    _PACKS.clear()


def flush() -> None:
    """Write the entries compiled since the last flush to their cache folders' pack files."""
    with _LOCK:
        for pack in list(_PACKS.values()):
            if pack.fresh:
                pack.write()


def _pack_of(cache_dir: str | os.PathLike[str]) -> _Pack:
    folder = os.fspath(cache_dir)
    pack = _PACKS.get(folder)
    if pack is None:
        pack = _PACKS[folder] = _Pack(folder)
    pack.refresh()
    return pack


def uncached_size(path: str, cache_dir: str | os.PathLike[str] | None = None) -> int:
    """The size of the file at ``path`` if ``compile_file`` would have to compile it now, else 0 (also when
    the file cannot be read: compiling it is an error that ``compile_file`` reports)."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    hit = _MEMORY.get(path)
    if hit is not None and hit[0] == (st.st_mtime_ns, st.st_size):
        return 0
    if cache_dir is not None:
        entry = _pack_of(cache_dir).entries.get(path)
        if entry is not None and entry[0] == st.st_mtime_ns and entry[1] == st.st_size:
            return 0
    return st.st_size


def compile_file(
    path: str | os.PathLike[str],
    display: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    helper: CompileHelper | None = None,
) -> CompiledFile:
    """The checked and compiled file at ``path`` (``display`` is its path in error messages).

    With ``cache_dir``, it comes from that folder's pack file when its entry is current, and a
    new entry goes there on the next ``flush()``. With ``helper``, a file no cache holds comes
    from that compile helper when it has compiled it (see ``prefetch``).
    """
    key = os.fspath(path)
    st = os.stat(key)
    stamp = (st.st_mtime_ns, st.st_size)
    shown = display if display is not None else key
    hit = _MEMORY.get(key)
    if hit is not None and hit[0] == stamp and hit[1].display == shown:
        return hit[1]
    pack = None
    compiled = None
    if cache_dir is not None:
        pack = _pack_of(cache_dir)
        entry = pack.entries.get(key)
        if entry is not None and entry[0] == stamp[0] and entry[1] == stamp[1]:
            compiled = _decode(entry[2], key, shown)
    if compiled is None:
        blob = None
        if helper is not None:
            done = helper.take(key, stamp)
            if isinstance(done, bytes):
                blob = done
                compiled = _decode(blob, key, shown)
            elif done is not None and done.display == shown:
                compiled = done
        if compiled is None:
            with open(key, "rb") as fh:
                source = fh.read()
            compiled = compile_source(source, key, shown)
            blob = None
        if pack is not None and time.time_ns() - st.st_mtime_ns > _RACY_NS:
            pack.add(key, (stamp[0], stamp[1], blob if blob is not None else encode(compiled)))
    _MEMORY[key] = (stamp, compiled)
    return compiled


def encode(compiled: CompiledFile) -> bytes:
    """The marshalled ``(code, load() statements)`` of ``compiled``, as the pack file stores it."""
    loads = tuple((s.label, s.symbols, s.line, s.col) for s in compiled.loads)
    return marshal.dumps((compiled.code, loads))


def _decode(blob: object, key: str, shown: str) -> CompiledFile | None:
    try:
        code, loads = marshal.loads(blob)  # type: ignore[arg-type]
        if type(code) is not CodeType:
            return None
        return CompiledFile(
            key, shown, code, tuple(LoadStatement(lbl, tuple(map(tuple, sym)), ln, col) for lbl, sym, ln, col in loads)
        )
    except (ValueError, EOFError, TypeError):
        return None


def write_private_file(target: Path, data: bytes) -> bool:
    """Atomically write a file of marinbuild's own under ``<workspace>/.marinbuild/`` (its folder made on first
    use, with a ``.gitignore`` of ``*``). False if the disk refuses: a cache that cannot be written only costs speed.

    Plain ``os`` calls on a temporary name unique to this process (no stat of the folder first, no
    random name, no buffered file object): a first load writes one of these per BUILD file.
    """
    tmp = os.path.join(target.parent, f".tmp-{os.getpid()}-{next(_SEQUENCE)}.bin")
    try:
        try:
            fd = os.open(tmp, _CREATE, 0o600)
        except FileNotFoundError:
            target.parent.mkdir(parents=True, exist_ok=True)
            (target.parent / ".gitignore").write_text("*\n")
            fd = os.open(tmp, _CREATE, 0o600)
    except OSError:  # also a name taken by a process of the same id on another host sharing the folder
        return False
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    return True
