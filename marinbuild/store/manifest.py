"""Output manifests: every file a step wrote, with its size and xxh3-128 digest.

Written at commit after the outputs and before the status, inside the step's action record, so a SUCCESS always comes
with a description of its outputs and ``cache verify`` can tell what changed. Files are hashed by streaming; on GCS,
files beyond ``MARINBUILD_MANIFEST_HASH_GB`` (default 1 GB) of a tree are recorded with size and the server's crc32c
only (GCS recomputes it on every write). Marin's files, marinbuild's records and temporary files are not outputs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import xxhash

from marinbuild.store import action_cache, fs
from marinbuild.store.status import DamagedFileError

FORMAT = "marinbuild-manifest/1"
NOT_OUTPUTS = frozenset({".executor_info", ".executor_status", ".executor_status.lock", ".artifact.json"})
CHUNK = 1 << 20


def is_output(name: str) -> bool:
    return name not in NOT_OUTPUTS and not name.startswith((".marinbuild", ".tmp-"))


@dataclass(frozen=True)
class FileEntry:
    path: str  # relative to the output folder, with ``/`` separators
    size: int
    xxh3_128: str | None
    crc32c: str | None = None  # GCS's; the check for files too large to hash


@dataclass
class Manifest:
    files: list[FileEntry] = field(default_factory=list)
    created: float = 0.0

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def digest(self) -> str:
        """xxh3-128 of the sorted file list: one value that names the whole output tree."""
        h = xxhash.xxh3_128()
        for f in sorted(self.files, key=lambda e: e.path):
            h.update(f"{f.path}\0{f.size}\0{f.xxh3_128 or ''}\0{f.crc32c or ''}\n".encode())
        return h.hexdigest()

    def to_json(self) -> dict[str, Any]:
        files = []
        for f in sorted(self.files, key=lambda e: e.path):
            entry: dict[str, Any] = {"path": f.path, "size": f.size, "xxh3_128": f.xxh3_128}
            if f.crc32c is not None:
                entry["crc32c"] = f.crc32c
            files.append(entry)
        return {
            "format": FORMAT,
            "created": self.created,
            "digest": self.digest(),
            "total_bytes": self.total_bytes,
            "files": files,
        }

    @classmethod
    def from_json(cls, path: str, obj: Any) -> Manifest:
        try:
            if obj.get("format") != FORMAT:
                raise ValueError(obj.get("format"))
            files = [
                FileEntry(str(f["path"]), int(f["size"]), f.get("xxh3_128"), f.get("crc32c")) for f in obj["files"]
            ]
            manifest = cls(files, float(obj.get("created", 0.0)))
        except (ValueError, TypeError, KeyError, AttributeError):
            raise DamagedFileError(path, f"manifest is not {FORMAT} JSON") from None
        if obj.get("digest") != manifest.digest():
            raise DamagedFileError(path, "manifest digest does not match its file list (the manifest was edited)")
        return manifest


def read_manifest(output_path: str) -> Manifest | None:
    """The manifest of the last commit at ``output_path`` (from its action record); None if none (Marin's)."""
    found: list[tuple[float, str, Any]] = []
    for digest in action_cache.digests_at(output_path):
        record = action_cache.read_record(output_path, digest)
        if record is not None and record.manifest is not None:
            found.append((record.created, action_cache.record_path(output_path, digest), record.manifest))
    if not found:
        return None
    _, path, obj = max(found, key=lambda item: item[0])
    return Manifest.from_json(path, obj)


# -- listing and hashing ------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    size: int
    crc32c: str | None = None


def list_outputs(output_path: str, top_level: set[str] | None = None) -> dict[str, Stat]:
    """Output files under ``output_path`` (relative path -> size); non-outputs directly in it go to ``top_level``."""
    if fs.is_local(output_path):
        found: dict[str, Stat] = {}
        stack = [(fs.local_path(output_path), "")]
        while stack:
            folder, rel_dir = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for entry in entries:
                rel = rel_dir + entry.name
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, rel + "/"))
                    elif is_output(entry.name):
                        found[rel] = Stat(entry.stat().st_size)
                    elif top_level is not None and not rel_dir:
                        top_level.add(entry.name)
                except FileNotFoundError:
                    continue
        return found
    filesystem = fs.filesystem_for(output_path)
    base = filesystem._strip_protocol(output_path).rstrip("/")
    try:
        listing = filesystem.find(output_path, detail=True)
    except FileNotFoundError:
        return {}
    result = {}
    for name, info in listing.items():
        if info.get("type") == "directory" or not name.startswith(base + "/"):
            continue
        rel = name[len(base) + 1 :]
        if not rel or rel.endswith("/"):
            continue
        if is_output(rel.rsplit("/", 1)[-1]):
            result[rel] = Stat(int(info.get("size") or 0), info.get("crc32c"))
        elif top_level is not None and "/" not in rel:
            top_level.add(rel)
    return result


def hash_local_file(path: str) -> str:
    h = xxhash.xxh3_128()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def hash_remote_file(url: str) -> str:
    h = xxhash.xxh3_128()
    with fs.filesystem_for(url).open(url, "rb", block_size=8 * CHUNK) as f:
        while chunk := f.read(8 * CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _hash_remote_many(urls: list[str]) -> dict[str, str]:
    """xxh3-128 of many small remote files, fetched concurrently (one request each)."""
    from marinbuild.store import gcs  # lazy: gcsfs

    if not urls:
        return {}
    filesystem = gcs.filesystem()

    async def fetch(url: str) -> tuple[str, str]:
        data = await filesystem._cat_file(url)
        return url, xxhash.xxh3_128_hexdigest(data)

    async def main() -> list[tuple[str, str]]:
        return await gcs.gather_limited([fetch(u) for u in urls], limit=32)

    return dict(gcs.run(main, fs=filesystem))


def hash_files(output_path: str, rels: list[str], stats: dict[str, Stat]) -> dict[str, str | None]:
    """xxh3-128 of each listed file (None for remote files beyond the hash budget)."""
    if fs.is_local(output_path):
        root = fs.local_path(output_path)
        return {rel: hash_local_file(os.path.join(root, *rel.split("/"))) for rel in rels}
    budget = int(float(os.environ.get("MARINBUILD_MANIFEST_HASH_GB", "1")) * (1 << 30))
    digests: dict[str, str | None] = {}
    small: list[str] = []
    for rel in sorted(rels, key=lambda r: stats[r].size):
        size = stats[rel].size
        if size > budget:
            digests[rel] = None
            continue
        budget -= size
        if size <= 8 * CHUNK:
            small.append(rel)
        else:
            digests[rel] = hash_remote_file(fs.join(output_path, rel))
    by_url = _hash_remote_many([fs.join(output_path, rel) for rel in small])
    for rel in small:
        digests[rel] = by_url[fs.join(output_path, rel)]
    return digests


def build_manifest(output_path: str, top_level: set[str] | None = None) -> Manifest:
    """List, then hash, the outputs now under ``output_path`` (``top_level``: see ``list_outputs``)."""
    stats = list_outputs(output_path, top_level)
    digests = hash_files(output_path, list(stats), stats)
    files = [FileEntry(rel, stats[rel].size, digests[rel], stats[rel].crc32c) for rel in sorted(stats)]
    return Manifest(files, time.time())
