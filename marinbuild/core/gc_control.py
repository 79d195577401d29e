"""How marinbuild drives Python's cyclic garbage collector: paused while building big tables, spared at exit.

``gc_paused()``: computing versions and plans, and loading BUILD files, allocate many small objects
that are never cyclic garbage; the collector would rescan the growing tables again and again. On
leaving, the objects made meanwhile go straight to the oldest generation (``gc.freeze`` then
``gc.unfreeze``, both constant-time list moves) instead of being scanned at the next allocation, where
a young-generation pass would walk every container of a large graph's tables. They are scanned
with the oldest generation, whose passes Python spaces out as it grows.

``skip_final_collection()``: at exit CPython collects every generation once more before tearing
modules down, a walk over every object of a finished build to free memory the operating system
reclaims anyway. An ``atexit`` hook moves every live object to the permanent generation
(``gc.freeze``) just before it, so it has nothing to scan. Nothing changes while the program runs:
code after ``executor_main`` still has a working collector; only cyclic garbage still alive at exit
is left to the operating system, as ``os._exit`` would.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Iterator

__all__ = ["gc_paused", "skip_final_collection"]

_registered = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (nestable); on leaving, move what was made to the oldest generation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:  # never thaw objects someone else froze (a pre-fork server)
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def _freeze_at_exit() -> None:
    gc.freeze()


def skip_final_collection() -> None:
    """Register (once per process) the exit hook that spares the final collection."""
    global _registered
    if not _registered:
        atexit.register(_freeze_at_exit)
        _registered = True
