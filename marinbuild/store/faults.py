"""Fault points: named places between the system calls of marinbuild's metadata writes, where a test kills the process.

``point(name)`` costs one global read unless ``MARINBUILD_KILL_AT_POINT`` is set in the environment when this
module is imported. With ``MARINBUILD_KILL_AT_POINT=N`` the process sends itself SIGKILL at the N-th point it passes
(counted from 1, across threads); with ``MARINBUILD_KILL_AT_POINT=N:NAME``, at the N-th pass of the point named exactly
NAME, which stays the same point however the threads of a build interleave (steps running side by side, the
background run-info write); or SIGSTOP with ``MARINBUILD_FAULT_SIGNAL=STOP`` (a pause another process can look
into, then resume with SIGCONT); with ``MARINBUILD_FAULT_POINT_LOG=FILE`` it appends each point's name to FILE (one
line per point, in order), so a test learns how many points a build passes and kills it at each in turn.
These are the moments a real crash (OOM kill, preemption, Ctrl-\\) can hit; nothing else reads them.
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
"""Any fault point is watched in this process."""

_count = 0
_passes: dict[str, int] = {}
_lock = threading.Lock()


def point(name: str) -> None:
    """Pass the fault point ``name``: logged, or the process killed here, when a test asked for it."""
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
