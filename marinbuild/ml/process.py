"""Running levanter work (tokenize, train, eval) in a child Python process.

jax, libtpu and levanter's global state belong to one process, and the build process never imports jax. The child is
``python -m marinbuild.ml.<module> PAYLOAD``: it reads its job from the JSON payload, writes its result JSON where it
says, and dies with its parent (``PR_SET_PDEATHSIG``). A child that wrote its result succeeded whatever its exit
code (native threads can crash the interpreter's teardown after the work). Its output goes to ``<log_dir>/<name>.log``
(appended across resumes); a remote log is written locally and copied up every ``upload_every`` seconds and at the
end, so a lost host leaves its log up to the last copy. The build's stderr gets warnings, errors, tracebacks and
progress lines (everything with ``MARINBUILD_ML_LOG=all`` or ``-v``). A failing child raises ``MlProcessError`` with
the log's tail."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import fsspec

PREFIX = "[marinbuild.ml]"
_INFO_LINE = re.compile(r"^[IDV]\d{8} ")  # absl/levanter INFO, DEBUG, VERBOSE lines
# Warnings levanter prints on every CPU run that tell a user nothing (they stay in the log).
_NOISE = re.compile(
    r"Unknown leaf type <class 'NoneType'>|Unknown device type: cpu|No resource mapping found"
    r"|warnings\.warn\(|^Loss: "
    # zephyr's coordinator (levanter's cache builder) before its local workers first report in
    r"|All workers are dead/failed\. Waiting for workers to recover"
    r"|Data loader stalled"
    # eval_harness: the datasets library's and tqdm's progress, levanter's note on lm-eval's
    # non-numeric result fields
    r"|^Generating \w+ split: |^\s*\d+%\|.*\| \d+/\d+ \[|Skipping non-numeric metric"
)
_PARENT_ENV = "MARINBUILD_ML_PARENT_PID"
LOG_UPLOAD_EVERY = 30.0  # Seconds between copies of a running child's log to a remote log folder.


class MlProcessError(RuntimeError):
    """The child process failed; the message ends with the tail of its log (``returncode``: negative for a signal)."""

    def __init__(self, message: str, returncode: int | None = None):
        super().__init__(message)
        self.returncode = returncode

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.args[0] if self.args else "", self.returncode)


def say(message: str) -> None:
    """A progress line from the child that the build shows."""
    print(f"{PREFIX} {message}", flush=True)


def is_local(path: str) -> bool:
    from fsspec.implementations.local import LocalFileSystem

    return isinstance(fsspec.core.url_to_fs(path)[0], LocalFileSystem)


def run_child(
    module: str,
    payload: dict[str, Any],
    *,
    log_dir: str,
    name: str,
    offline: bool = False,
    env: dict[str, str] | None = None,
    upload_every: float = LOG_UPLOAD_EVERY,
) -> dict[str, Any]:
    """Run ``python -m module`` on ``payload``; return the result JSON it wrote."""
    work = tempfile.mkdtemp(prefix=f"marinbuild-{name}-")
    payload_path = os.path.join(work, "payload.json")
    result_path = os.path.join(work, "result.json")
    with open(payload_path, "w") as f:
        json.dump({**payload, "result_path": result_path}, f)
    local_logs = log_dir if is_local(log_dir) else os.path.join(work, "logs")
    os.makedirs(local_logs, exist_ok=True)
    log_path = os.path.join(local_logs, f"{name}.log")
    remote_log = None if is_local(log_dir) else os.path.join(log_dir, f"{name}.log")
    mirror = _LogMirror(log_path, remote_log, upload_every) if remote_log else None
    child_env = dict(os.environ)
    child_env.update({_PARENT_ENV: str(os.getpid()), "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "1"})
    if offline:  # a local tokenizer: never wait on the Hub
        child_env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    child_env.update(env or {})
    forward_all = os.environ.get("MARINBUILD_ML_LOG") == "all" or os.environ.get("MARINBUILD_VERBOSE") == "1"
    tail: deque[str] = deque(maxlen=60)
    proc = subprocess.Popen(
        [sys.executable, "-m", module, payload_path],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=child_env,
        text=True,
        errors="replace",
        bufsize=1,
    )
    assert proc.stdout is not None
    with open(log_path, "a") as log:
        _pump(proc.stdout, log, tail, forward_all)
    code = proc.wait()
    if mirror is not None:
        mirror.close()
    try:
        result = None
        with contextlib.suppress(OSError, ValueError), open(result_path) as f:
            result = json.load(f)
        if result is None:
            lines = "".join(tail).rstrip()
            where = remote_log or log_path
            raise MlProcessError(f"{module} exited with code {code}; log: {where}; last lines:\n{lines}", code)
        if code != 0:
            _forward(f"{PREFIX} {module} exited with code {code} after writing its result: the result stands\n")
        return result
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _pump(stream: Any, log: Any, tail: deque[str], forward_all: bool) -> None:
    in_traceback = False
    for line in stream:
        log.write(line)
        log.flush()
        tail.append(line)
        if line.startswith("Traceback"):
            in_traceback = True
        elif in_traceback and not line.startswith((" ", "\t")):
            in_traceback = False
            _forward(line)
            continue
        if forward_all or in_traceback or PREFIX in line or not (_INFO_LINE.match(line) or _NOISE.search(line)):
            _forward(line)


def _forward(line: str) -> None:
    with contextlib.suppress(ValueError, OSError):  # a closed or replaced stderr must not break the step
        sys.stderr.write(line)
        sys.stderr.flush()


class _LogMirror:
    """Keeps ``remote`` a copy of the child's ``local`` log: old content, then every ``every`` s and at ``close``."""

    def __init__(self, local: str, remote: str, every: float):
        self.local, self.remote, self.every = local, remote, every
        self._copied = -1
        self._stop = threading.Event()
        try:
            fs, path = fsspec.core.url_to_fs(remote)
            if fs.exists(path):
                with open(local, "wb") as f:
                    f.write(fs.cat_file(path))
        except Exception as exc:  # logs are a convenience; the step's result does not depend on them
            _forward(f"{PREFIX} could not read the earlier log {remote}: {exc}\n")
        self._thread = threading.Thread(target=self._loop, name="marinbuild-log-mirror", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._copy()

    def _copy(self) -> None:
        size = os.path.getsize(self.local)
        if size == self._copied:
            return
        try:
            fs, path = fsspec.core.url_to_fs(self.remote)
            fs.makedirs(os.path.dirname(path), exist_ok=True)
            fs.put_file(self.local, path)
            self._copied = size
        except Exception as exc:  # logs are a convenience; the step's result does not depend on them
            _forward(f"{PREFIX} could not upload {self.local} to {self.remote}: {exc}\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._copy()


# -- in the child ---------------------------------------------------------------------------


def child_main(run: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """The ``__main__`` of a child module: set up, run ``run(payload)``, write its result. An error ends the process
    at once, after its traceback, without exit handlers: on a multi-host slice jax.distributed's would wait minutes
    in a shutdown barrier for hosts that are not coming, holding back the restart."""
    _die_with_parent()
    with open(sys.argv[1]) as f:
        payload = json.load(f)
    try:
        result = run(payload)
    except Exception:
        traceback.print_exc()  # unbuffered (PYTHONUNBUFFERED): nothing is left to flush
        os._exit(1)
    with open(payload["result_path"], "w") as f:
        json.dump(result, f, indent=2, default=str)


def _die_with_parent_only() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; False where that cannot be asked."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    except Exception:
        return False
    return True


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (and exit now if it already has)."""
    if not _die_with_parent_only():
        return
    expected = os.environ.get(_PARENT_ENV)
    if expected and os.getppid() != int(expected):
        os._exit(1)  # the parent died before we could ask
