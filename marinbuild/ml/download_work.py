"""The work of a download worker (a local thread or a Ray task): copy one file, verify it, commit it.

``fetch_file(job)`` (a plain dict, as it crosses processes): a file whose done marker matches the listing is ``cached``;
else the source is streamed into ``<dest>.partial-<random>``, hashed on the way, checked against its size and published
checksums (``ChecksumMismatchError``, partial copy deleted), moved into place, and only then is the done marker (its
manifest record) written atomically: a file is done exactly when its marker exists. A kill leaves at worst a
``.partial-*`` copy, removed on the next fetch. Transient read errors get three attempts; a mismatch none."""

from __future__ import annotations

import glob
import json
import os
import time
import uuid
from typing import Any

from marinbuild.ml.checksums import Digests, mismatches
from marinbuild.store import fs as store_fs

CHUNK = 8 * 1024 * 1024  # Bytes read and written at a time (Marin's download step streams 8 MiB chunks too).
ATTEMPTS = 3


class ChecksumMismatchError(ValueError):
    """The bytes a source served for a file do not match the size or checksum it publishes for it."""


def read_marker(marker: str) -> dict[str, Any] | None:
    data = store_fs.read_bytes(marker)
    return json.loads(data) if data is not None else None


def matches(record: dict[str, Any] | None, job: dict[str, Any]) -> bool:
    """A done marker's record is this listing's file: same size, same published checksums."""
    if record is None:
        return False
    if job.get("size") is not None and record.get("size") != job["size"]:
        return False
    return all(record.get(kind) == value.lower() for kind, value in job.get("published", {}).items())


def fetch_file(job: dict[str, Any]) -> dict[str, Any]:
    """Copy, verify and commit ``job``'s file; its manifest record plus ``state``, ``seconds``, ``node``."""
    from marinbuild.ml.run_log import node_name  # lazy: fsspec

    record = read_marker(job["marker"])
    if matches(record, job) and store_fs.exists(job["dest"]):
        assert record is not None
        return {**record, "state": "cached", "seconds": 0.0, "node": node_name()}
    start = time.time()
    for attempt in range(1, ATTEMPTS + 1):
        try:
            actual = _copy(job)
            break
        except ChecksumMismatchError:
            raise
        except Exception:
            if attempt == ATTEMPTS:
                raise
            time.sleep(attempt)
    record = {"path": job["path"], "size": actual.pop("_size"), **actual, "source": job["url"]}
    store_fs.write_atomic(job["marker"], json.dumps(record, sort_keys=True).encode())
    return {**record, "state": "fetched", "seconds": round(time.time() - start, 3), "node": node_name()}


def _copy(job: dict[str, Any]) -> dict[str, Any]:
    dest = job["dest"]
    _remove_leftovers(dest)
    tmp = f"{dest}.partial-{uuid.uuid4().hex[:12]}"
    digests = Digests(set(job.get("published", {})), job.get("size"))
    try:
        with _open_source(job) as src, _open_dest(tmp) as out:
            while chunk := src.read(CHUNK):
                digests.update(chunk)
                out.write(chunk)
        actual = digests.hexdigests()
        problems = []
        if job.get("size") is not None and digests.size != job["size"]:
            problems.append(f"size {digests.size} != listed {job['size']}")
        problems += mismatches(job.get("published", {}), actual)
        if problems:
            raise ChecksumMismatchError(
                f"{job['path']}: {'; '.join(problems)} (from {job['url']}); "
                f"the copy was deleted and the file not marked done"
            )
        _commit(tmp, dest)
    except BaseException:
        _discard(tmp)
        raise
    return {**actual, "_size": digests.size}


def _open_source(job: dict[str, Any]) -> Any:
    url = job["url"]
    if job.get("hub"):
        import fsspec
        from huggingface_hub.utils import build_hf_headers

        http = fsspec.filesystem("https" if url.startswith("https") else "http", headers=build_hf_headers())
        return http.open(url, "rb", block_size=0, size=job.get("size"))  # a size known: no request to learn it
    if url.startswith(("http://", "https://")):
        import fsspec

        return fsspec.filesystem(url.split("://", 1)[0]).open(url, "rb", block_size=0, size=job.get("size"))
    if url.startswith(("gs://", "gcs://")):
        return store_fs.filesystem_for(url).open(url, "rb")
    import fsspec

    return fsspec.open(url, "rb").open()


def _open_dest(path: str) -> Any:
    if store_fs.is_local(path):
        local = store_fs.local_path(path)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        return open(local, "wb")
    return store_fs.filesystem_for(path).open(path, "wb")


def _commit(tmp: str, dest: str) -> None:
    if store_fs.is_local(dest):
        os.replace(store_fs.local_path(tmp), store_fs.local_path(dest))
        return
    store_fs.filesystem_for(dest).mv(tmp, dest)


def _discard(path: str) -> None:
    try:
        store_fs.remove(path)
    except Exception:  # best effort: a leftover .partial-* is never taken for the file
        pass


def _remove_leftovers(dest: str) -> None:
    """Partial copies of this file a killed attempt left (local folders: an unfinished upload leaves no object)."""
    if store_fs.is_local(dest):
        for leftover in glob.glob(glob.escape(store_fs.local_path(dest)) + ".partial-*"):
            _discard(leftover)
