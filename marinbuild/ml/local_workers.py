"""Local pool workers that outlive their step: later steps and builds of the same user, same key, claim them warm.

A worker is a process listening on ``<id>.sock`` in its key's folder, ``marinbuild-workers/<key>/`` under
``$XDG_RUNTIME_DIR`` (else ``<tmp>/marinbuild-workers-<uid>``, mode 0700). A step claims an idle one by taking
``<id>.lock``'s flock without waiting and connecting, and holds the lock while it uses it; it spawns one (its
lock taken and its socket bound before the process starts: never claimed twice, connected at once) only when
none is idle. Why no server process: the kernel keeps the books. A flock goes with its holder, a dead worker's
socket refuses connections (whoever finds it removes its files); nothing to restart, no registry to repair.

The key: the Python executable, ``sys.path``, the working folder, the digest of marinbuild's files, levanter's
version, ``offline``, and every environment variable but marinbuild's own and those a shell or terminal sets per
session (``_VOLATILE``): a worker never serves a step whose code or environment differs from its own.

A session: the step sends ``(log_path, warm)``, then ``(fn, job)`` after ``(fn, job)``, each answered ``(ok,
result or error)``. Its end (EOF) while a message is unanswered means the step died or gave up mid-job: the worker
exits at once, never writing for nobody nor serving the next step half-done. An idle worker exits after
``MARINBUILD_WORKER_IDLE`` seconds without a session (default 600); 0: it serves only the step that spawned it,
exiting when the step closes its pool or dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import hashlib
import importlib.metadata
import itertools
import json
import os
import pickle
import queue
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from marinbuild.ml import shard_work

IDLE_ENV = "MARINBUILD_WORKER_IDLE"
_VOLATILE = re.compile(
    r"_|PWD|OLDPWD|SHLVL|COLUMNS|LINES|PS\d|LS_COLORS|DISPLAY|WINDOWID|STY|XDG_RUNTIME_DIR|XDG_SESSION_.*"
    r"|(TERM|SSH_|TMUX|PYTEST_|MARINBUILD_|COV_CORE_).*"
)
_STARTED, _SESSIONS = time.monotonic(), itertools.count(1)
_MAIN = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); import marinbuild.ml.local_workers as w; w.serve()"


def idle_timeout() -> float:
    value = os.environ.get(IDLE_ENV, "600")
    try:
        return max(0.0, float(value))
    except ValueError:
        raise ValueError(f"{IDLE_ENV}={value!r}: give the seconds an idle pool worker lives (0: none)") from None


@functools.cache
def _code_digest() -> str:
    root, digest = Path(__file__).resolve().parents[1], hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes())
    return digest.hexdigest()


def key_folder(offline: bool) -> str:
    """This process's workers' folder (made, and checked to be the user's own)."""
    levanter = next((d.version for d in importlib.metadata.distributions(name="levanter")), None)
    env = sorted((k, v) for k, v in os.environ.items() if not _VOLATILE.fullmatch(k))
    facts = [sys.executable, sys.path, os.getcwd(), _code_digest(), levanter, offline, env]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    top = f"{runtime}/marinbuild-workers" if runtime else f"{tempfile.gettempdir()}/marinbuild-workers-{os.getuid()}"
    os.makedirs(top, mode=0o700, exist_ok=True)
    if (st := os.stat(top)).st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{top} is not this user's alone (mode 0700): remove it, or set XDG_RUNTIME_DIR")
    folder = f"{top}/{hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]}"
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return folder


@dataclass
class Worker:
    """The step's end of a worker's session, and the lock that claims it (closed: back to idle, or gone)."""

    conn: Connection
    lock: int | None

    def close(self) -> None:
        self.conn.close()
        if self.lock is not None:
            os.close(self.lock)


def open_worker(folder: str | None, offline: bool, first: tuple[str | None, Any]) -> Worker:
    """An idle worker of ``folder`` claimed, else a new one spawned (``folder`` None: a worker for this step only),
    sent ``hello(first)`` (log path, warm-up)."""
    worker = (_claim(folder) if folder else None) or _spawn(folder, offline, first[0])
    with contextlib.suppress(OSError):  # it died: found at its first job
        worker.conn.send((hello, first))
    return worker


def _claim(folder: str) -> Worker | None:
    for path in (p.removesuffix(".lock") for p in glob.glob(f"{folder}/*.lock")):
        try:
            lock, sock = os.open(f"{path}.lock", os.O_RDWR), socket.socket(socket.AF_UNIX)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            sock.connect(f"{path}.sock")
            return Worker(Connection(sock.detach()), lock)
        except BlockingIOError:  # busy
            pass
        except OSError:  # dead: its files go too
            _remove(path)
        sock.close()
        os.close(lock)
    return None


def _remove(path: str) -> None:
    for name in (f"{path}.sock", f"{path}.lock"):  # not the folder: a step may be about to spawn in it
        with contextlib.suppress(OSError):
            os.unlink(name)


def _spawn(folder: str | None, offline: bool, log_path: str | None) -> Worker:
    lock = None
    if folder is None:
        given, mine = socket.socketpair()
    else:
        path = f"{folder}/{uuid.uuid4().hex[:12]}"
        lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        given, mine = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
        given.bind(f"{path}.sock")
        given.listen()
        mine.connect(f"{path}.sock")
    argv = [sys.executable, "-c", _MAIN, json.dumps(sys.path), str(given.fileno()), str(idle_timeout()), str(offline)]
    with open(log_path or os.devnull, "ab") as log:  # never the build's own output: a worker may outlive it
        kw: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": log, "stderr": log}
        subprocess.Popen(argv, pass_fds=[given.fileno()], start_new_session=folder is not None, **kw)
    given.close()
    return Worker(Connection(mine.detach()), lock)


# -- in the worker ---------------------------------------------------------------------------


def serve() -> None:
    """A worker's main: sessions on the socket (fd ``argv[2]``) until idle ``argv[3]`` seconds (0: one session)."""
    sock, idle = socket.socket(fileno=int(sys.argv[2])), float(sys.argv[3])
    shard_work.set_worker_env(sys.argv[4] == "True")
    if not idle:  # its step's end, or death, ends the session
        _session(sock)
        os._exit(0)
    path = sock.getsockname().removesuffix(".sock")
    sock.settimeout(idle)
    while True:
        try:
            conn = sock.accept()[0]
        except TimeoutError:  # idle: gone, unless a step just claimed it (its connection on the way)
            with contextlib.suppress(FileNotFoundError):
                lock = os.open(f"{path}.lock", os.O_RDWR)
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(lock)
                    continue
            _remove(path)
            os._exit(0)
        conn.setblocking(True)
        _session(conn)


def _session(sock: socket.socket) -> None:
    """``(fn, job)`` after ``(fn, job)``, each answered (but ``hello``); EOF mid-job ends the process."""
    conn, inbox, unanswered, guard = Connection(sock.detach()), queue.SimpleQueue[Any](), [0], threading.Lock()

    def read() -> None:
        message: Any = True
        while message is not None:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                message = None
            with guard:
                if message is None and unanswered[0]:
                    os._exit(1)  # the step is gone mid-job
                unanswered[0] += message is not None
            inbox.put(message)

    reader = threading.Thread(target=read, name="marinbuild-session", daemon=True)
    reader.start()
    while (message := inbox.get()) is not None:
        answer = _answer(*message)
        sys.stdout.flush()  # stderr is line-buffered
        with guard:
            unanswered[0] -= 1
        with contextlib.suppress(OSError):  # the step is gone: the reader sees it
            if message[0] is not hello:
                conn.send(answer)
    reader.join()
    conn.close()


def hello(job: tuple[str | None, Any]) -> None:
    """A session's first message: the step's log (``None``: none) gets this worker's output; the warm-up."""
    sys.stdout.flush()
    fd = os.open(job[0] or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    up = time.monotonic() - _STARTED
    print(f"[marinbuild] pool worker {os.getpid()}: session {next(_SESSIONS)}, up {up:.0f} s", flush=True)
    if job[1] is not None:
        with contextlib.suppress(Exception):  # a broken tokenizer fails the first job, with its own error
            job[1][0](job[1][1])


def _answer(fn: Any, job: Any) -> tuple[bool, Any]:
    try:
        return True, fn(job)
    except Exception as e:
        e.add_note(f"in a pool worker process:\n{traceback.format_exc()}")
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            e = RuntimeError(f"{type(e).__name__}: {e}")
        return False, e
