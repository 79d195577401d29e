"""Leases on a local (or NFS-like) filesystem, compatible with Marin's ``LocalFileLease``.

Mutual exclusion is ``flock`` on the lease file itself, as Marin's, so Marin and marinbuild runners exclude each other.
Closing Marin's release race: after locking, the open file must still be the one at the path (same inode). A new lease
file appears with its record in it (``link`` of a written temporary file) and a rewrite is one ``pwrite`` padded to the
old length, so no reader sees it empty and no kill tears it; the file is never replaced, as the flock lives on its
inode."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator

from marinbuild.store import faults
from marinbuild.store.lease import Lease, LeaseLostError, LeaseRecord, encode_lease, parse_lease
from marinbuild.store.status import DamagedFileError

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class LocalFileLease(Lease):
    makes_output_folder = True

    @contextlib.contextmanager
    def _locked(self, create: bool, exclusive: bool = True) -> Iterator[int | None]:
        """The lease file's descriptor, flock'ed, or None if absent and not ``create`` (raw: fewer system calls)."""
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
                if self._is_current(fd):
                    yield fd
                    return
            finally:
                os.close(fd)  # also drops the flock
            # The file we opened was unlinked while we waited: open the current one.

    def _is_current(self, fd: int) -> bool:
        try:
            return os.fstat(fd).st_ino == os.stat(self.path).st_ino
        except FileNotFoundError:
            return False

    @staticmethod
    def _read(fd: int) -> bytes:
        return os.pread(fd, 1 << 16, 0)  # a lease record is far smaller

    def _write(self, fd: int, record: LeaseRecord) -> None:
        data = encode_lease(record)
        size = os.fstat(fd).st_size
        if size > len(data):
            data += b" " * (size - len(data))
        faults.point("lease-rewrite " + _step_name(self.path))
        os.pwrite(fd, data, 0)

    def _make_folder(self) -> None:
        folder = os.path.dirname(self.path)
        try:
            os.mkdir(folder)
        except FileExistsError:
            pass
        except FileNotFoundError:
            os.makedirs(folder, exist_ok=True)

    def _try_create(self) -> bool:
        """Create the lease file with our record in it (``link`` of a written temporary); False if one exists."""
        self._make_folder()
        folder = os.path.dirname(self.path)
        tmp = os.path.join(folder, f".tmp-lease.{os.urandom(6).hex()}")
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_RDWR | _CLOEXEC, 0o644)
        try:
            os.write(fd, encode_lease(LeaseRecord(self.worker_id, time.time())))
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                return False
            faults.point("lease-created " + _step_name(self.path))
        finally:
            os.unlink(tmp)
            os.close(fd)
        return True

    def try_acquire(self) -> bool:
        if self._try_create():
            return True
        with self._locked(create=True) as f:
            assert f is not None
            if not self._free(f):
                return False
            self._write(f, LeaseRecord(self.worker_id, time.time()))
            return True

    def _free(self, fd: int) -> bool:
        """With ``fd`` flock'ed: may we take it? Empty: yes (its writer died, or an opener will read ours); a record: if
        ours, stale or its holder gone; unparsable (never marinbuild's): once past the stale time."""
        data = self._read(fd)
        if not data.strip():
            return True
        try:
            current = parse_lease(self.path, data)
        except DamagedFileError:
            return time.time() - os.fstat(fd).st_mtime > self.stale_after
        return current is None or current.worker_id == self.worker_id or current.is_over(self.stale_after)

    def refresh(self) -> None:
        with self._locked(create=False) as f:
            if f is None:
                raise LeaseLostError(f"lease {self.path} disappeared: another runner took over")
            self._ensure_ours(parse_lease(self.path, self._read(f)))
            self._write(f, LeaseRecord(self.worker_id, time.time()))

    def confirm(self) -> None:
        """Read-only (``check``): the heartbeat keeps the lease fresh, and it is released right after the commit."""
        self.check()

    def release(self) -> None:
        self.remove_if(self._is_ours)

    def _is_ours(self, data: bytes) -> bool:
        try:
            current = parse_lease(self.path, data)
        except Exception:
            return False
        return current is not None and current.worker_id == self.worker_id

    def remove_if(self, remove: Callable[[bytes], bool]) -> bool:
        """Unlink the lease file if ``remove(its content)`` says so, under its flock; whether it did."""
        with self._locked(create=False) as f:
            if f is None or not remove(self._read(f)):
                return False
            os.unlink(self.path)
            return True

    def holder(self) -> LeaseRecord | None:
        with self._locked(create=False, exclusive=False) as f:
            return None if f is None else parse_lease(self.path, self._read(f))


def _step_name(lease_file: str) -> str:
    return os.path.basename(os.path.dirname(lease_file))
