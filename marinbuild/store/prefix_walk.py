"""Walking a prefix: step folders, sizes, modification times and deletion, local or fsspec.

``Store(path)`` is one interface for both kinds of prefix: local folders use ``os`` directly, any other URL its fsspec
filesystem. Paths handed out keep the caller's spelling (``gs://bucket/x/...``), so they compare equal to executor
output paths."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from marinbuild.store import fs
from marinbuild.store.records import INFO_FILE
from marinbuild.store.status import STATUS_FILE

STEP_MARKERS = (INFO_FILE, STATUS_FILE)  # a folder holding either is a step's output folder


def normalize(path: str) -> str:
    """A path in the form used for comparisons: no trailing slash, no ``.`` segments locally."""
    return os.path.normpath(fs.local_path(path)) if fs.is_local(path) else path.rstrip("/")


class Store:
    """Listing, walking, sizing and deleting under one prefix."""

    def __init__(self, root: str):
        self.root = root
        self.local = fs.is_local(root)
        self.fs: Any = None if self.local else fs.filesystem_for(root)

    # -- path spelling ------------------------------------------------------------------------
    def _to_url(self, stripped: str, base: str) -> str:
        """An fsspec-stripped path under ``base`` spelled like ``base``."""
        base_stripped = self.fs._strip_protocol(base).rstrip("/")
        rel = stripped.rstrip("/")[len(base_stripped) :].lstrip("/")
        return fs.join(base, rel) if rel else base.rstrip("/")

    # -- queries ------------------------------------------------------------------------------
    def is_dir(self, path: str) -> bool:
        if self.local:
            return os.path.isdir(fs.local_path(path))
        try:
            return bool(self.fs.isdir(path))
        except OSError:
            return False

    def names(self, path: str) -> list[str] | None:
        """Names of the files and folders directly in ``path`` (sorted); None if it is not a folder."""
        if self.local:
            try:
                with os.scandir(fs.local_path(path)) as it:
                    return sorted(e.name for e in it)
            except (FileNotFoundError, NotADirectoryError):
                return None
        if not self.is_dir(path):
            return None
        own = self.fs._strip_protocol(path).rstrip("/")
        return sorted(
            name.rstrip("/").rsplit("/", 1)[-1] for name in self.fs.ls(path, detail=False) if name.rstrip("/") != own
        )

    def subdirs(self, path: str) -> list[str]:
        """Names of the folders directly in ``path`` (sorted; none if it is missing)."""
        if self.local:
            try:
                with os.scandir(fs.local_path(path)) as it:
                    return sorted(e.name for e in it if e.is_dir(follow_symlinks=False))
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            listing = self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        own = self.fs._strip_protocol(path).rstrip("/")
        names = [
            info["name"].rstrip("/").rsplit("/", 1)[-1]
            for info in listing
            if info.get("type") == "directory" and info["name"].rstrip("/") != own
        ]
        return sorted(names)

    def mtime(self, path: str) -> float | None:
        """The file's modification time (seconds since the epoch), None if it is missing."""
        if self.local:
            try:
                return os.stat(fs.local_path(path)).st_mtime
            except (FileNotFoundError, NotADirectoryError):
                return None
        try:
            modified = self.fs.modified(path)
        except (FileNotFoundError, NotImplementedError, OSError):
            return mtime_from_info(self._info(path))
        return modified.timestamp() if isinstance(modified, datetime) else float(modified)

    def _info(self, path: str) -> dict[str, Any] | None:
        try:
            return self.fs.info(path)
        except (FileNotFoundError, OSError):
            return None

    def usage(self, path: str) -> tuple[int, int]:
        """(bytes, files) of every file under the folder ``path`` (symlinks are not followed)."""
        total = count = 0
        if self.local:
            for dirpath, _dirs, files in os.walk(fs.local_path(path)):
                for name in files:
                    try:
                        total += os.lstat(os.path.join(dirpath, name)).st_size
                    except FileNotFoundError:
                        continue
                    count += 1
            return total, count
        try:
            found = self.fs.find(path, detail=True)
        except FileNotFoundError:
            return 0, 0
        for info in found.values():
            if info.get("type", "file") != "directory":
                total += int(info.get("size") or 0)
                count += 1
        return total, count

    def step_folders(self) -> Iterator[str]:
        """Every step output folder under the root, in sorted order; never descends into one."""
        if self.local:
            root = fs.local_path(self.root)
            for dirpath, dirnames, filenames in os.walk(root):
                if dirpath != root and any(m in filenames for m in STEP_MARKERS):
                    dirnames[:] = []
                    yield dirpath
                    continue
                dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
            return
        for dirpath, dirnames, filenames in self.fs.walk(self.root, detail=False):
            url = self._to_url(dirpath, self.root)
            if normalize(url) != normalize(self.root) and any(m in filenames for m in STEP_MARKERS):
                dirnames[:] = []
                yield url
                continue
            dirnames[:] = sorted(dirnames)

    # -- changes ------------------------------------------------------------------------------
    def rmtree(self, path: str) -> None:
        if self.local:
            shutil.rmtree(fs.local_path(path))
        else:
            self.fs.rm(path, recursive=True)


def mtime_from_info(info: dict[str, Any] | None) -> float | None:
    """The modification time an fsspec ``info`` reports, in whichever field its filesystem uses."""
    if not info:
        return None
    for key in ("mtime", "updated", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, datetime):
            return value.timestamp()
        if isinstance(value, int | float):
            return float(value)
        try:
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
    return None
