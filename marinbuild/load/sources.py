"""Content hashes of source files (xxh3-128), with a persistent stat cache so unchanged files are not re-read. The cache
maps an absolute path to ``[size, mtime_ns, inode, digest]`` (JSON); a digest is reused only while all three match.
Files modified in the last two seconds are not cached: a second write in the same clock tick could leave their stat
unchanged."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

_CHUNK = 1 << 20
_RACY_NS = 2_000_000_000
_VERSION = 1


class StatCache:
    """``path -> (size, mtime_ns, inode, digest)``, loaded from and saved to a JSON file."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self.entries: dict[str, list[int | str]] = {}
        self.dirty = False
        self._resolved: dict[str, Path] = {}
        self._display: dict[tuple[str, str], str] = {}
        try:
            data = json.loads(self.path.read_text()) if self.path is not None else None
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and data.get("version") == _VERSION and isinstance(data.get("entries"), dict):
            self.entries = data["entries"]

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """``Path(path).resolve()`` once per path per build: analysis resolves the same few files for every target."""
        key = os.fspath(path)
        resolved = self._resolved.get(key)
        if resolved is None:
            resolved = self._resolved[key] = Path(key).resolve()
        return resolved

    def display_path(self, path: str | os.PathLike[str], root: Path) -> str:
        """``path`` resolved, relative to ``root`` when inside it (POSIX form); once per (path, root) likewise."""
        key = (os.fspath(path), os.fspath(root))
        shown = self._display.get(key)
        if shown is None:
            resolved = self.resolve(path)
            try:
                shown = resolved.relative_to(self.resolve(root)).as_posix()
            except ValueError:
                shown = str(resolved)
            self._display[key] = shown
        return shown

    def lookup(self, key: str, st: os.stat_result) -> str | None:
        entry = self.entries.get(key)
        return str(entry[3]) if entry is not None and entry[:3] == [st.st_size, st.st_mtime_ns, st.st_ino] else None

    def store(self, key: str, st: os.stat_result, digest: str) -> None:
        self.entries[key] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
        self.dirty = True

    def save(self) -> None:
        """Write the cache atomically (if it changed and has a path)."""
        if self.path is None or not self.dirty:
            return
        import tempfile  # here, not at the top: shutil, random, bz2, lzma... that loading never needs

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".stat_cache.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump({"version": _VERSION, "entries": self.entries}, fh, separators=(",", ":"))
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.dirty = False


def hash_source_file(path: str | os.PathLike[str], stat_cache: StatCache | None = None) -> str:
    """The xxh3-128 hex digest of the file at ``path``, reusing ``stat_cache`` when its stat is unchanged."""
    key = os.path.abspath(path)
    st = os.stat(key)
    if stat_cache is not None:
        cached = stat_cache.lookup(key, st)
        if cached is not None:
            return cached
    import xxhash  # on first use: a load that hashes no file does not pay for it

    hasher = xxhash.xxh3_128()
    with open(key, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            hasher.update(chunk)
    digest = hasher.hexdigest()
    if stat_cache is not None and time.time_ns() - st.st_mtime_ns > _RACY_NS:
        stat_cache.store(key, st, digest)
    return digest
