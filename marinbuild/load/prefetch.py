"""Compiling many BUILD files on a second core: a forked helper compiles while the loader evaluates.

CPython's ``compile()`` is more than half of a first load of a large workspace, and the
loader evaluates one file at a time. When a load is about to compile many files that no
cache holds, ``CompileHelper.start`` forks a child that compiles them with the very same
``compile_source``, in the order the loader will ask for them, and sends each result back
as the marshalled ``(code, load() statements)`` the compiled-file cache stores. The loader
asks for its files in that order (``take``): a file the child has sent is decoded; a file
the child has not reached is compiled by the loader itself; while the child is still on
the very file the loader needs, the loader compiles the last file nobody has taken yet if
the child has more compiling left than the loader has other work left (at the paces seen so
far), else it waits for that file, but not longer than the child has taken per file (a child
the system stopped running must not stop the loader). So the two processes share the
work however fast each one runs, and a starved child costs the loader only the fork. Which
side has a file is settled through one shared byte per file (0: nobody yet, 1: the loader,
2: the child); a file both sides took at the same moment is compiled twice, harmlessly.

Nothing the child does is trusted beyond the compiled code: a file it could not compile
(syntax error, a forbidden construct, a file that vanished) is compiled again by the
loader, which alone reports errors, and a result is used only if the file's ``(mtime_ns,
size)`` when it was read is the one the loader sees (the compiled-file cache's own key).
The helper is used only where ``fork`` is safe and useful: a POSIX system, at least two
usable cores, no other thread in the process (counted by the kernel, so native threads of an
extension count too), and enough source to repay the fork.
"""

from __future__ import annotations

import mmap
import os
import select
import signal
import struct
import sys
import threading
import time
from collections.abc import Sequence

from marinbuild.load.codecache import encode
from marinbuild.load.dialect import CompiledFile, compile_source
from marinbuild.load.errors import BuildFileError

__all__ = ["MIN_BYTES", "SWITCH", "CompileHelper", "can_fork"]

MIN_BYTES = 64 * 1024
"""Least total size of the files to compile for a helper to pay (about 15 ms of compiling; the fork costs the
loader under 1 ms)."""
MIN_FILES = 4
"""Least number of files to compile for a helper."""
_HEADER = struct.Struct("<iiqqi")  # index, ok, mtime_ns, size, length of the marshalled result
_FREE, _PARENT, _CHILD = 0, 1, 2


SWITCH = "MARINBUILD_COMPILE_HELPER"
"""Set to ``0`` to never fork a compile helper (every file is then compiled by the loading process)."""


def can_fork() -> bool:
    """Whether this process may fork a compile helper: POSIX, two usable cores, a single thread, not switched
    off (``MARINBUILD_COMPILE_HELPER=0``)."""
    if not hasattr(os, "fork") or sys.platform == "emscripten" or os.environ.get(SWITCH) == "0":
        return False
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return cores >= 2 and _threads() == 1


def _threads() -> int:
    """This process's threads, as the kernel counts them: also those no ``threading`` object stands for (the
    native threads of Ray's core worker, gRPC, JAX), which may hold a lock at the moment of a fork. The child
    would inherit that lock held for good; where it runs Python (this helper does) the first use deadlocks or
    aborts (abseil's "Mutex corrupt" check). ``threading.active_count()`` where there is no ``/proc``."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


class CompileHelper:
    """A forked child compiling ``files`` (``(path, display)`` in the order the loader will ask for them)."""

    def __init__(self, files: Sequence[tuple[str, str]]) -> None:
        self.files = list(files)
        self.index = {path: i for i, (path, _display) in enumerate(self.files)}
        self.pid = 0
        self.fd = -1
        self.claims: mmap.mmap | None = None
        self.results: dict[int, tuple[int, int, bytes] | None] = {}  # from the child: index -> (mtime, size, blob)
        self.own: dict[int, tuple[tuple[int, int], CompiledFile]] = {}  # compiled by take() while it waited
        self.last = len(self.files) - 1  # no file after this one is free
        self.started = 0.0  # when the child was forked
        self.sent = 0  # results the child has sent
        self.mark = 0.0  # when take() last returned
        self.busy = 0.0  # the caller's time between take() calls, over `asked` intervals
        self.asked = 0
        self.buffer = bytearray()
        self.eof = False

    @classmethod
    def start(cls, files: Sequence[tuple[str, str]]) -> CompileHelper | None:
        """A running helper for ``files``, or ``None`` if forking is not possible here."""
        if len(files) < 2 or not can_fork():
            return None
        helper = cls(files)
        claims = mmap.mmap(-1, len(files))  # anonymous and shared: the child sees the loader's claims
        read_fd, write_fd = os.pipe()
        _widen(read_fd)
        try:
            pid = os.fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            claims.close()
            return None
        if pid == 0:  # the child: compile, send, and leave without running any of the parent's exit code
            status = 1
            try:
                os.close(read_fd)
                _serve(helper.files, claims, write_fd)
                status = 0
            finally:
                os._exit(status)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        helper.pid, helper.fd, helper.claims, helper.started = pid, read_fd, claims, time.perf_counter()
        return helper

    def take(self, path: str, stamp: tuple[int, int]) -> bytes | CompiledFile | None:
        """``path`` compiled by the child (its marshalled ``(code, loads)``) or by ``take`` itself meanwhile (a
        ``CompiledFile``), if it was compiled as the file is now (``stamp``: its ``(mtime_ns, size)``); ``None``
        if the caller must compile it (then it is the caller's: the child may compile it too, for nothing)."""
        i = self.index.get(path)
        claims = self.claims
        if i is None or claims is None:
            return None
        now = time.perf_counter()
        if self.mark:
            self.busy += now - self.mark
            self.asked += 1
        try:
            while True:
                self._drain()
                if i in self.results:
                    result = self.results.pop(i)
                    return result[2] if result is not None and (result[0], result[1]) == stamp else None
                own = self.own.pop(i, None)
                if own is not None:
                    return own[1] if own[0] == stamp else None
                if claims[i] != _CHILD or self.eof:
                    claims[i] = _PARENT
                    return None
                # the child is on it: wait for it while the child has less left than the caller (no longer
                # than the child takes for a file), else compile a file the child has not reached yet; with
                # none left, wait as long again, then compile it here too (a stalled child stalls nothing)
                if not self._behind(i) and self._readable(self._pace()):
                    continue
                if self._compile_last(i) or self._readable(self._pace()):
                    continue
                claims[i] = _PARENT
                return None
        finally:
            self.mark = time.perf_counter()

    def _behind(self, i: int) -> bool:
        """Whether the child, on file ``i``, has more compiling left than the caller has work on the files after
        ``i``, at the paces seen so far (the child's since it started, whatever slowed it; the caller's between
        two ``take()`` calls): then the caller compiles one more file itself."""
        if not self.sent or not self.asked:
            return True  # no pace known yet
        assert self.claims is not None
        free = self.claims[i + 1 : self.last + 1].count(_FREE)
        return free * self._pace() > (len(self.files) - 1 - i) * (self.busy / self.asked)

    def _pace(self) -> float:
        """The child's seconds per file so far (from the fork, so counting the time it was not running)."""
        return (time.perf_counter() - self.started) / max(self.sent, 1)

    def _readable(self, timeout: float) -> bool:
        """Whether the child sends something within ``timeout`` seconds."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        return bool(poller.poll(max(1, round(min(timeout, 60.0) * 1000))))

    def _compile_last(self, after: int) -> bool:
        """Compile the last file after index ``after`` that nobody has taken; False if there is none."""
        claims = self.claims
        assert claims is not None
        j = self.last
        while j > after and claims[j] != _FREE:
            j -= 1
        self.last = j
        if j <= after:
            return False
        claims[j] = _PARENT
        path, display = self.files[j]
        try:
            st = os.stat(path)
            with open(path, "rb") as fh:
                source = fh.read()
            self.own[j] = ((st.st_mtime_ns, st.st_size), compile_source(source, path, display))
        except (OSError, BuildFileError):
            pass  # compiled again when its turn comes, which reports the error
        return True

    def close(self) -> None:
        """Stop the child (whatever it is doing) and reap it; ``take`` returns ``None`` from now on."""
        if self.claims is None:
            return
        self.claims.close()
        self.claims = None
        os.close(self.fd)
        try:
            os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        self.results.clear()

    def _drain(self) -> None:
        """Read what the child has sent so far."""
        while not self.eof:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not chunk:
                self.eof = True
            self.buffer += chunk
        self._parse()

    def _parse(self) -> None:
        buffer = self.buffer
        at = 0
        size = _HEADER.size
        while len(buffer) - at >= size:
            i, ok, mtime_ns, file_size, length = _HEADER.unpack_from(buffer, at)
            if len(buffer) - at - size < length:
                break
            start = at + size
            self.results[i] = (mtime_ns, file_size, bytes(buffer[start : start + length])) if ok else None
            self.sent += 1
            at = start + length
        del buffer[:at]


def _widen(fd: int) -> None:
    """Let the pipe hold a megabyte (Linux; else its default, 64 kB or less): most of a large load's results,
    so that the child does not wait for the loader to read them."""
    try:
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
    except (ImportError, AttributeError, OSError):
        pass


def _serve(files: list[tuple[str, str]], claims: mmap.mmap, fd: int) -> None:
    """The child's work: compile every file nobody took, in order, and write each result to ``fd``."""
    for i in range(len(files)):
        if claims[i] != _FREE:
            continue
        claims[i] = _CHILD
        view = memoryview(_record(i, *files[i]))
        while view:
            view = view[os.write(fd, view) :]


def _record(i: int, path: str, display: str) -> bytes:
    """What the child sends for file ``i``: a header, then the marshalled result (none if it failed)."""
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            source = fh.read()
        blob = encode(compile_source(source, path, display))
    except Exception:  # the loader compiles the file itself and reports what is wrong with it
        return _HEADER.pack(i, 0, 0, 0, 0)
    return _HEADER.pack(i, 1, st.st_mtime_ns, st.st_size, len(blob)) + blob
