"""How marinbuild drives Python's cyclic garbage collector: paused while building big tables, spared at exit.

``gc_paused()``: versions, plans and loaded BUILD files are many small objects, never cyclic garbage; on leaving they go
straight to the oldest generation (``gc.freeze``/``gc.unfreeze``, constant time). ``skip_final_collection()``: an
``atexit`` hook freezes every object before CPython's final collection walks them all, as ``os._exit`` would."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
from collections.abc import Iterator


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


@functools.cache
def skip_final_collection() -> None:
    """Register (once per process) the exit hook that spares the final collection."""
    atexit.register(gc.freeze)
