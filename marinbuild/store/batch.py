"""Batched status reads for remote prefixes: a few listings instead of a request per step.

For ``gs://`` paths ``read_statuses`` lists: steps grouped by parent folder, a group of ``GROUP_MIN`` or more listed in
chunks of ``CHUNK_STEPS`` consecutive folders (``startOffset``/``endOffset``) narrowed by ``matchGlob`` to the status
and action records (fake-gcs-server ignores it: filtered here), a lone step by a listing bounded to its own records; all
concurrently on gcsfs's event loop. The md5 of each one-word status is known, so only other content (Marin's legacy JSON
lines, garbage) is downloaded; the action records listed beside make collision checks free.

Each page is folded in as it arrives (``_Fold``, three fields decoded: ``gcs.Listed``), so memory follows the steps, not
the bytes listed; a listing failing on any page fails the read (never a partial answer). The cyclic collector is paused
meanwhile (at 100,000 steps its passes cost as much as the parsing). Local paths are read directly, other protocols in
threads. ``read_md5s`` answers another object's md5 (the code record) from listings grouped alike; ``read_many`` reads
many small objects."""

from __future__ import annotations

import base64
import hashlib
from collections import defaultdict
from collections.abc import Callable, Container, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from marinbuild.core.gc_control import gc_paused
from marinbuild.store import action_cache, fs
from marinbuild.store import status as st

if TYPE_CHECKING:
    from marinbuild.store import gcs as gcs_types

GROUP_MIN = 4
CHUNK_STEPS = 400
CONCURRENCY = 100  # Listings in flight at once (aiohttp's default connection pool of a gcsfs session is 100).
PAGE_SIZE = 1000  # Objects per listing page (``maxResults``; GCS sends at most 1,000).


def md5_of(data: bytes) -> str:
    """``data``'s md5 as GCS gives an object's (``md5Hash``: the raw digest in base64)."""
    return base64.b64encode(hashlib.md5(data).digest()).decode()


_KNOWN = {md5_of(s.encode()): s for s in st.STATUSES}
_STATUS_NAME = st.STATUS_FILE
_GLOB_SPECIAL = set("*?[]{}\\")


class StatusMap(dict[str, str | None]):
    """Output path -> status, plus what the batched read learned on the way."""

    def __init__(self) -> None:
        super().__init__()
        self.actions: dict[str, frozenset[str]] = {}
        """Output path -> the action-record digests found beside its status (paths that were listed)."""

    def merge(self, other: StatusMap) -> None:
        self.update(other)
        self.actions.update(other.actions)


def _is_gcs(path: str) -> bool:
    return path.startswith(("gs://", "gcs://"))


def _is_other_remote(path: str) -> bool:
    """A remote path on another fsspec protocol than GCS (read a file at a time, in threads)."""
    return "://" in path and not path.startswith("file://") and not _is_gcs(path)


def read_statuses(output_paths: list[str], workers: int = 16) -> StatusMap:
    """Statuses of many steps; ``gs://`` ones by batched listings (see the module docstring)."""
    result = StatusMap()
    gcs_paths: list[str] = []
    remote_other: list[str] = []
    for path in output_paths:
        if _is_gcs(path):
            gcs_paths.append(path)
        elif _is_other_remote(path):
            remote_other.append(path)
        else:
            result[path] = st.read_status(path)
    if remote_other:
        with ThreadPoolExecutor(workers) as pool:
            result.update(zip(remote_other, pool.map(st.read_status, remote_other), strict=True))
    if gcs_paths:
        with gc_paused():  # parsing the listings: many objects, no cyclic garbage (see the module docstring)
            read = _read_gcs(gcs_paths)
        if not result:
            return read
        result.merge(read)
    return result


def _groups(keys: list[str]) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """``keys`` (one bucket's step folders) as the listings cover them: folders alone (fewer than ``GROUP_MIN`` in their
    parent), and chunks of ``CHUNK_STEPS`` of one parent, with its listing prefix."""
    by_parent: dict[str, list[str]] = defaultdict(list)
    for key in keys:
        by_parent[key.rpartition("/")[0]].append(key)
    alone: list[str] = []
    chunks: list[tuple[str, list[str]]] = []
    for parent, group in by_parent.items():
        group.sort()
        if len(group) < GROUP_MIN:
            alone.extend(group)
            continue
        base = parent + "/" if parent else ""
        chunks.extend((base, group[i : i + CHUNK_STEPS]) for i in range(0, len(group), CHUNK_STEPS))
    return alone, chunks


def _bounds(bucket: str, base: str, chunk: list[str]) -> dict[str, Any]:
    """The listing of a chunk's folders: everything under ``base`` from its first folder to past its last."""
    return {"bucket": bucket, "prefix": base, "start": chunk[0] + "/", "end": chunk[-1] + "0"}


def _chunks(bucket: str, keys: list[str], globbing: bool) -> list[dict[str, Any]]:
    """Status listings covering ``keys`` (step folders of one bucket); ``globbing``: the server applies matchGlob."""
    alone, chunks = _groups(keys)
    requests: list[dict[str, Any]] = [
        {  # the few names between its status and its records
            "bucket": bucket,
            "prefix": key + "/",
            "start": f"{key}/{_STATUS_NAME}",
            "end": f"{key}/{action_cache.RECORD_PREFIX[:-1]}/",
        }
        for key in alone
    ]
    for base, chunk in chunks:
        bounds = _bounds(bucket, base, chunk)
        if globbing and not (_GLOB_SPECIAL & set(base)):
            # Two plain globs (status objects; action records), at once: only those objects come back.
            requests.append({**bounds, "glob": (f"{base}*/{_STATUS_NAME}", _is_status)})
            requests.append({**bounds, "glob": (f"{base}*/{action_cache.RECORD_PREFIX}*", _is_record)})
        else:
            requests.append(bounds)
    return requests


def _is_status(name: str) -> bool:
    return name.endswith("/" + _STATUS_NAME)


def _is_record(name: str) -> bool:
    return action_cache.digest_of_name(name.rpartition("/")[2]) is not None


class _Fold:
    """The statuses and action records of the wanted step folders, folded in a listing page at a time as pages arrive on
    gcsfs's loop: a page's objects are dropped once read, so memory follows the steps, not the bytes listed. A listed
    object's folder is looked up by canonical path (``gs://<bucket>/<folder>``) in the result itself, which holds every
    wanted path from the start, so nothing else is kept per step; other spellings (``gcs://``, a trailing slash) are
    ``aliases``."""

    def __init__(self, paths: list[str], aliases: dict[str, list[str]]) -> None:
        self.aliases = aliases  # Canonical path -> the other wanted paths naming its folder.
        self.result = StatusMap()
        """Every wanted path: None (no status listed) until its status object is seen; no action record until
        one is seen."""
        self.result.update(dict.fromkeys(paths))
        self.result.actions.update(dict.fromkeys(paths, frozenset()))
        self.unknown: list[str] = []  # Canonical paths of statuses whose md5 is not a known status word.

    def targets(self, canonical: str) -> Sequence[str]:
        """The wanted paths naming the folder of ``canonical`` (none: it is not wanted)."""
        return _targets(canonical, self.result, self.aliases)

    def page(self, bucket: str, items: list[gcs_types.Listed]) -> None:
        result, actions = self.result, self.result.actions
        aliases, unknown = self.aliases, self.unknown
        root = f"gs://{bucket}/"
        record_prefix, record_suffix = action_cache.RECORD_PREFIX, action_cache.RECORD_SUFFIX
        record_length = len(record_prefix) + 64 + len(record_suffix)  # ``action_cache.digest_of_name``, inlined
        digest_start, digest_end = len(record_prefix), -len(record_suffix)
        for obj in items:
            folder, _, base = obj.name.rpartition("/")
            if base == _STATUS_NAME:
                is_status = True
            elif len(base) == record_length and base.startswith(record_prefix) and base.endswith(record_suffix):
                is_status = False
            else:
                continue  # outputs, code records, Marin's info files: a server that ignores ``matchGlob`` sends them
            canonical = root + folder
            if aliases:
                targets = self.targets(canonical)
            elif canonical in result:
                targets = (canonical,)
            else:
                continue
            if is_status:
                status = _KNOWN.get(obj.md5Hash) if obj.size > 0 else None
                if status is None and obj.size > 0:
                    unknown.append(canonical)
                for p in targets:
                    result[p] = status
            else:
                digest = base[digest_start:digest_end]
                for p in targets:
                    have = actions[p]
                    if digest not in have:
                        actions[p] = have | {digest} if have else frozenset((digest,))


def _targets(canonical: str, wanted: Container[str], aliases: dict[str, list[str]]) -> Sequence[str]:
    """The paths of ``wanted`` naming the folder ``canonical`` (``gs://<bucket>/<folder>``): itself, its ``aliases``."""
    extra = aliases.get(canonical)
    if extra is None:
        return [canonical] if canonical in wanted else []
    return [canonical, *extra] if canonical in wanted else extra


def _folders(output_paths: list[str]) -> tuple[dict[str, set[str]], dict[str, list[str]]]:
    """``gs://`` step folders by bucket, and paths spelled otherwise (``gcs://``, trailing ``/``) by canonical path."""
    from marinbuild.store import gcs  # lazy here and below: gcsfs

    aliases: dict[str, list[str]] = defaultdict(list)
    keys_by_bucket: dict[str, set[str]] = defaultdict(set)
    for path in output_paths:
        bucket, key = gcs.split(path)
        keys_by_bucket[bucket].add(key)
        canonical = f"gs://{bucket}/{key}"
        if canonical != path:
            aliases[canonical].append(path)
    return keys_by_bucket, dict(aliases)


def _read_gcs(output_paths: list[str]) -> StatusMap:
    from marinbuild.store import gcs

    filesystem = gcs.filesystem()
    keys_by_bucket, aliases = _folders(output_paths)
    requests = [
        r for bucket, keys in keys_by_bucket.items() for r in _chunks(bucket, list(keys), filesystem.match_glob)
    ]
    del keys_by_bucket  # the folder names: not held while the listings are read
    fold = _Fold(output_paths, aliases)

    _list_all(filesystem, requests, fold.page)
    result = fold.result
    # Content we cannot tell from its md5 (Marin's legacy JSON lines): downloaded, in one concurrent round.
    to_fetch = fold.unknown
    if to_fetch:

        async def fetch_all() -> list[tuple[bytes, int] | None]:
            return await gcs.gather_limited(
                [gcs._read_with_generation(filesystem, f"{canonical}/{_STATUS_NAME}") for canonical in to_fetch],
                limit=CONCURRENCY,
            )

        for canonical, got in zip(to_fetch, gcs.run(fetch_all, fs=filesystem), strict=True):
            status = None if got is None else st.parse_status(f"{canonical}/{_STATUS_NAME}", got[0])
            for p in fold.targets(canonical):
                result[p] = status
    return result


def read_md5s(output_paths: list[str], name: str, named: bool = False) -> dict[str, str | None]:
    """The md5 of ``<output path>/<name>`` for each ``gs://`` path of ``output_paths``, None where it does not exist
    (other stores: not in the answer), from listings grouped as for the statuses, narrowed to ``name``. ``named``:
    the name of an object whose name starts with ``name`` instead (a compute record's carries its hours)."""
    gcs_paths = [p for p in output_paths if _is_gcs(p)]
    result: dict[str, str | None] = dict.fromkeys(gcs_paths)
    if not gcs_paths:
        return result
    from marinbuild.store import gcs  # lazy: gcsfs, only for a gs:// prefix

    filesystem = gcs.filesystem()
    keys_by_bucket, aliases = _folders(gcs_paths)
    suffix = "/" + name

    def is_wanted(listed: str) -> bool:
        return listed.rpartition("/")[2].startswith(name) if named else listed.endswith(suffix)

    requests: list[dict[str, Any]] = []
    for bucket, keys in keys_by_bucket.items():
        alone, chunks = _groups(list(keys))
        requests.extend({"bucket": bucket, "prefix": f"{key}/{name}"} for key in alone)
        for base, chunk in chunks:
            bounds = _bounds(bucket, base, chunk)
            globbing = filesystem.match_glob and not (_GLOB_SPECIAL & set(base + name))
            glob = f"{base}*/{name}" + ("*" if named else "")
            requests.append({**bounds, "glob": (glob, is_wanted)} if globbing else bounds)
    del keys_by_bucket

    def fold(bucket: str, items: list[gcs_types.Listed]) -> None:
        root = f"gs://{bucket}/"
        for obj in items:
            folder, _, base = obj.name.rpartition("/")
            if base.startswith(name) if named else base == name:
                for p in _targets(root + folder, result, aliases):
                    result[p] = base if named else obj.md5Hash

    with gc_paused():  # parsing the listings: many objects, no cyclic garbage
        _list_all(filesystem, requests, fold)
    return result


def _list_all(filesystem: Any, requests: list[dict[str, Any]], fold: Callable[[str, Any], None]) -> None:
    """Run the listing ``requests`` concurrently on gcsfs's loop, handing each page to ``fold(bucket, page)``."""
    from marinbuild.store import gcs

    async def listings() -> None:
        async def one(r: dict[str, Any]) -> None:
            async for page in gcs.list_pages(
                filesystem,
                r["bucket"],
                r["prefix"],
                start=r.get("start"),
                end=r.get("end"),
                glob=r.get("glob"),
                page_size=PAGE_SIZE,
            ):
                fold(r["bucket"], page)

        await gcs.gather_limited([one(r) for r in requests], limit=CONCURRENCY)

    gcs.run(listings, fs=filesystem)


def read_many(paths: list[str], workers: int = 16) -> list[bytes | None]:
    """The contents of ``paths`` (None if unreadable): ``gs://`` ones concurrently on gcsfs's loop, others threaded."""

    def one(path: str) -> bytes | None:
        try:
            return fs.read_bytes(path)
        except OSError:
            return None

    result: list[bytes | None] = [None] * len(paths)
    gcs_at = [i for i, p in enumerate(paths) if _is_gcs(p)]
    other_at = [i for i, p in enumerate(paths) if not _is_gcs(p)]
    if gcs_at:
        from marinbuild.store import gcs

        filesystem = gcs.filesystem()

        async def read(path: str) -> bytes | None:
            try:
                got = await gcs._read_with_generation(filesystem, path)
            except OSError:
                return None
            return None if got is None else got[0]

        async def read_all() -> list[bytes | None]:
            return await gcs.gather_limited([read(paths[i]) for i in gcs_at], limit=CONCURRENCY)

        for i, data in zip(gcs_at, gcs.run(read_all, fs=filesystem), strict=True):
            result[i] = data
    if len(other_at) > 1 and any(_is_other_remote(paths[i]) for i in other_at):
        with ThreadPoolExecutor(min(workers, len(other_at))) as pool:
            for i, data in zip(other_at, pool.map(one, [paths[i] for i in other_at]), strict=True):
                result[i] = data
    else:
        for i in other_at:
            result[i] = one(paths[i])
    return result
