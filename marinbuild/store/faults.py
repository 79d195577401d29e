"""Fault points: named places between the system calls of marinbuild's metadata writes, where a test kills the process.

``point(name)`` costs one global read unless ``MARINBUILD_KILL_AT_POINT`` is set at import: ``=N`` sends SIGKILL at the
N-th point passed, ``=N:NAME`` at the N-th pass of point NAME. ``MARINBUILD_FAULT_SIGNAL=STOP`` sends SIGSTOP instead;
``MARINBUILD_FAULT_POINT_LOG=FILE`` appends each point's name to FILE, so a test can kill a build at each point in turn.
"""

from __future__ import annotations

import os
import signal
import threading

_KILL_COUNT, _, _KILL_NAME = (os.environ.get("MARINBUILD_KILL_AT_POINT") or "0").partition(":")
_KILL_AT = int(_KILL_COUNT or 0)
_LOG = os.environ.get("MARINBUILD_FAULT_POINT_LOG") or None
_SIGNAL = signal.SIGSTOP if os.environ.get("MARINBUILD_FAULT_SIGNAL") == "STOP" else signal.SIGKILL
ACTIVE = bool(_KILL_AT or _LOG)

_count = 0
_passes: dict[str, int] = {}
_lock = threading.Lock()


def point(name: str) -> None:
    if not ACTIVE:
        return
    global _count
    with _lock:
        _count += 1
        if _LOG:
            with open(_LOG, "a") as f:
                f.write(name + "\n")
        if _KILL_NAME:
            _passes[name] = _passes.get(name, 0) + 1
            stop = name == _KILL_NAME and _passes[name] == _KILL_AT
        else:
            stop = _count == _KILL_AT
    if stop:
        os.kill(os.getpid(), _SIGNAL)
