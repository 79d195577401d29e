"""Skipping the interpreter's last full garbage collection when a process that built a large graph exits.

At exit CPython collects every generation once more before tearing modules down. After a build of
10,000 steps that pass walks some 300,000 container objects and took 0.4 s of a 1.2 s no-op run, to
free memory the operating system reclaims anyway. ``skip_final_collection()`` registers an ``atexit``
hook that moves every live object to the permanent generation (``gc.freeze``, a constant-time list
move) just before that collection, so it has nothing to scan. Nothing changes while the program
runs: code after ``executor_main`` still has a working collector; only cyclic garbage still alive at
exit is left to the operating system, as ``os._exit`` would.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def _freeze_at_exit() -> None:
    gc.freeze()


def skip_final_collection() -> None:
    """Register (once per process) the exit hook that spares the final collection."""
    global _registered
    if not _registered:
        atexit.register(_freeze_at_exit)
        _registered = True
