"""Other versions of a step under a prefix: the folders ``<prefix>/<name>-<hash>`` besides the current one.

What a dry run calls a stale step (``engine/planning.py``: another version of it left an output), what ``why`` compares
a step's config with (the latest other version's ``.executor_info``), and what ``cache`` commands list. One listing per
parent folder answers many steps (a remote prefix: no round trip per step)."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from marinbuild.store import fs
from marinbuild.store import status as st
from marinbuild.store.prefix_walk import Store, normalize
from marinbuild.store.records import INFO_FILE, read_info
from marinbuild.store.status import DamagedFileError


def _versions(parent: str, folders: list[str], base: str, exclude: str | None) -> list[str]:
    """The folders ``<parent>/<base>-<hash>`` among ``folders``, except ``exclude``."""
    pattern = re.compile(re.escape(base) + r"-[0-9a-f]{6}\Z")
    skip = normalize(exclude) if exclude else None
    return [fs.join(parent, f) for f in folders if pattern.match(f) and normalize(fs.join(parent, f)) != skip]


def _left_output(path: str) -> bool:
    return fs.exists(fs.join(path, INFO_FILE)) or fs.exists(st.status_path(path))


def sibling_paths(prefix: str, name: str, exclude: str | None = None) -> list[str]:
    """Folders ``<prefix>/<name>-<hash>`` (other versions of step ``name``) except ``exclude``."""
    parent, _, base = fs.join(prefix, name).rpartition("/")
    return _versions(parent, Store(prefix).subdirs(parent), base, exclude) if parent else []


def has_other_version(prefix: str, name: str, exclude: str | None = None) -> bool:
    """Whether some other version of step ``name`` left an output (a folder with ``.executor_info``/status)."""
    return any(_left_output(p) for p in sibling_paths(prefix, name, exclude))


def with_other_versions(prefix: str, outputs: dict[str, str], workers: int = 16) -> set[str]:
    """The step names of ``outputs`` with another version, one listing per parent folder (no round trip per step)."""
    parents: dict[str, list[str]] = {}
    for name in outputs:
        parent = fs.join(prefix, name).rpartition("/")[0]
        if parent:
            parents.setdefault(parent, []).append(name)
    if not parents:
        return set()
    store = Store(prefix)
    with ThreadPoolExecutor(max_workers=min(workers, len(parents))) as pool:
        listings = dict(zip(parents, pool.map(store.subdirs, parents), strict=True))
    candidates: list[tuple[str, str]] = []
    for parent, names in parents.items():
        for name in names:
            base = fs.join(prefix, name).rpartition("/")[2]
            candidates.extend((name, p) for p in _versions(parent, listings[parent], base, outputs[name]))
    if not candidates:
        return set()
    with ThreadPoolExecutor(max_workers=min(workers, len(candidates))) as pool:
        found = list(pool.map(_left_output, [path for _name, path in candidates]))
    return {name for (name, _path), present in zip(candidates, found, strict=True) if present}


@dataclass
class OtherVersion:
    output_path: str
    info: dict[str, Any]
    mtime: float | None


def latest_other_version(prefix: str, name: str, exclude: str | None = None) -> OtherVersion | None:
    """The newest other version of step ``name`` whose ``.executor_info`` parses (by status, else info, mtime)."""
    store = Store(prefix)
    best: OtherVersion | None = None
    for path in sibling_paths(prefix, name, exclude):
        try:
            info = read_info(path)
        except DamagedFileError:
            continue
        if info is None or not isinstance(info.get("version"), dict):
            continue
        mtime = store.mtime(st.status_path(path))
        if mtime is None:
            mtime = store.mtime(fs.join(path, INFO_FILE))
        candidate = OtherVersion(path, info, mtime)
        if best is None or (mtime or 0.0) > (best.mtime or 0.0):
            best = candidate
    return best
