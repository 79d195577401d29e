"""fsspec access to prefixes: filesystem lookup, joins, and atomic writes.

A prefix is a local folder or any fsspec URL (``gs://bucket/path``, ``memory://x``). Local paths use the local
filesystem directly where fsspec would only add overhead."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from marinbuild.store import faults

DEFAULT_LOCAL_PREFIX = "/tmp/marin"  # Marin's, when MARIN_PREFIX is not set
FILE_MODE = 0o644  # of files written through a temporary file: what a plain ``open`` gives


def default_prefix() -> str:
    """Where outputs go when nothing says: ``MARIN_PREFIX`` if set, else Marin's local default folder."""
    return os.environ.get("MARIN_PREFIX") or DEFAULT_LOCAL_PREFIX


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://") :] if path.startswith("file://") else path


@lru_cache(maxsize=32)
def _filesystem(protocol: str) -> Any:
    import fsspec

    return fsspec.filesystem(protocol)


def filesystem_for(path: str) -> Any:
    """The fsspec filesystem serving ``path`` (one per protocol; ``gs://``: ``store.gcs``'s retrying one)."""
    protocol = path.split("://", 1)[0] if "://" in path else "file"
    if protocol in ("gs", "gcs"):
        from marinbuild.store import gcs  # lazy: gcsfs

        return gcs.filesystem()
    return _filesystem(protocol)


def join(base: str, *names: str) -> str:
    if "://" not in base or base.startswith("file://"):
        return os.path.join(base, *names)
    return "/".join([base.rstrip("/"), *names])


def read_bytes(path: str) -> bytes | None:
    """The file's content, or None when it does not exist."""
    if is_local(path):
        try:
            fd = os.open(local_path(path), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:  # not a file object: its set-up costs more than these calls (a no-op reads two files a step)
            chunks = [os.read(fd, 65536)]
            while chunks[-1]:
                chunks.append(os.read(fd, 1 << 20))
            return b"".join(chunks)
        finally:
            os.close(fd)
    fs = filesystem_for(path)
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def write_atomic(path: str, data: bytes) -> None:
    """Write ``data`` so a reader sees the old content or the new, never a torn file (all metadata goes through here): a
    temporary file then ``os.replace``. No fsync: see docs/reliability.md."""
    if is_local(path):
        write_atomic_pieces(path, [data])
    else:  # object stores replace an object in one request: readers never see half of it
        filesystem_for(path).pipe_file(path, data)


def write_atomic_pieces(path: str, pieces: Iterable[bytes]) -> None:
    """``write_atomic`` of the concatenated ``pieces``; a local file is streamed, never joined in memory."""
    if not is_local(path):
        write_atomic(path, b"".join(pieces))
        return
    target = local_path(path)
    directory, name = os.path.split(target)
    try:
        fd, tmp = create_temporary(directory, name)
    except FileNotFoundError:  # the folder's first file (most writes go to a step's folder, made when it started)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = create_temporary(directory, name)
    try:
        try:  # raw writes: a file object's set-up (and its fstat) costs more than a metadata file's few writes
            for piece in pieces:
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        if faults.ACTIVE:  # named by folder and file, without values in the name (a compute record's hours)
            faults.point(f"before-replace {os.path.basename(directory)}/{name.split('=', 1)[0]}")
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def create_temporary(directory: str, name: str) -> tuple[int, str]:
    """A new ``.tmp-<name>.<random>`` in ``directory``, made exclusively (``mkstemp`` without importing tempfile)."""
    while True:
        tmp = os.path.join(directory, f".tmp-{name}.{os.urandom(6).hex()}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), FILE_MODE), tmp
        except FileExistsError:
            continue


def exists(path: str) -> bool:
    return os.path.exists(local_path(path)) if is_local(path) else filesystem_for(path).exists(path)


def makedirs(path: str) -> None:
    if is_local(path):
        os.makedirs(local_path(path), exist_ok=True)
    elif path.startswith(("gs://", "gcs://")):
        return  # an object store has no folders to make: a request here would only cost time
    else:
        filesystem_for(path).makedirs(path, exist_ok=True)


def remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        if is_local(path):
            os.unlink(local_path(path))
        else:
            filesystem_for(path).rm_file(path)
