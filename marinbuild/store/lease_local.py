"""Leases on a local (or NFS-like) filesystem, compatible with Marin's ``LocalFileLease``.

Mutual exclusion is ``flock`` on the lease file itself, as Marin does, so a Marin runner
and a marinbuild runner on one machine exclude each other. One addition closes Marin's
release race: after locking, the open file must still be the one at the path (same
inode); a lease deleted by its releaser while we waited is reopened, never written to.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from marinbuild.store.lease import Lease, LeaseLostError, LeaseRecord, encode_lease, parse_lease

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_READ_SIZE = 4096


class LocalFileLease(Lease):
    makes_output_folder = True

    @contextlib.contextmanager
    def _locked(self, create: bool, exclusive: bool = True) -> Iterator[int | None]:
        """Yield the lease file's descriptor, flock'ed, or None if it does not exist and ``create`` is False.

        Raw descriptors, not Python file objects: a file object costs four more system calls to open
        (fstat, ioctl, two lseeks) and more per read, and every step takes, checks and releases a lease.
        """
        while True:
            if create:
                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o644)
            else:
                try:
                    fd = os.open(self.path, os.O_RDWR | _CLOEXEC)
                except FileNotFoundError:
                    yield None
                    return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    yield fd
                    return
            finally:
                os.close(fd)  # also drops the flock
            # The file we opened was unlinked while we waited: open the current one.

    @staticmethod
    def _read(fd: int) -> bytes:
        chunks = []
        offset = 0
        while True:
            data = os.pread(fd, _READ_SIZE, offset)
            if not data:
                break
            chunks.append(data)
            offset += len(data)
            if len(data) < _READ_SIZE:  # a short read of a regular file is its end
                break
        return b"".join(chunks)

    def _write(self, fd: int, record: LeaseRecord) -> None:
        data = encode_lease(record)
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))  # overwrite then cut: cheaper than emptying first, same result under the lock

    def _try_create(self) -> bool | None:
        """Fast path: create the lease file if there is none. None if one already exists."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
        except FileExistsError:
            return None
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            return self._try_create()
        try:  # a new, empty file: one write under the lock, nothing to seek over or cut
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, encode_lease(LeaseRecord(self.worker_id, time.time())))
        finally:
            os.close(fd)
        return True

    def try_acquire(self) -> bool:
        if self._try_create():
            return True
        with self._locked(create=True) as f:
            assert f is not None
            data = self._read(f)
            if not data.strip():
                # Empty: its creator is between creating and writing it (or died there long ago).
                age = time.time() - os.fstat(f).st_mtime
                if age <= self.stale_after:
                    return False
            current = parse_lease(self.path, data)
            if current is not None and current.worker_id != self.worker_id and not current.is_stale(self.stale_after):
                return False
            self._write(f, LeaseRecord(self.worker_id, time.time()))
            return True

    def refresh(self) -> None:
        with self._locked(create=False) as f:
            if f is None:
                raise LeaseLostError(f"lease {self.path} disappeared: another runner took over")
            current = parse_lease(self.path, self._read(f))
            if current is None or current.worker_id != self.worker_id:
                holder = current.worker_id if current else "nobody"
                raise LeaseLostError(f"lease {self.path} is held by {holder}, not {self.worker_id}")
            self._write(f, LeaseRecord(self.worker_id, time.time()))

    def confirm(self) -> None:
        """Read-only (``check``): the heartbeat keeps the lease fresh, and it is released right after the commit."""
        self.check()

    def release(self) -> None:
        with self._locked(create=False) as f:
            if f is None:
                return
            try:
                current = parse_lease(self.path, self._read(f))
            except Exception:
                return
            if current is not None and current.worker_id == self.worker_id:
                os.unlink(self.path)

    def holder(self) -> LeaseRecord | None:
        with self._locked(create=False, exclusive=False) as f:
            if f is None:
                return None
            return parse_lease(self.path, self._read(f))
