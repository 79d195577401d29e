"""How marinbuild drives Python's cyclic garbage collector: paused while building big tables, spared at exit.

``gc_paused()``: versions, plans and loaded BUILD files are many small objects, never cyclic garbage, that the
collector would rescan again and again as they grow. On leaving, they go straight to the oldest generation
(``gc.freeze`` then ``gc.unfreeze``, constant-time list moves), whose passes Python spaces out as it grows.

``skip_final_collection()``: at exit CPython collects every generation once more, a walk over every object of a
finished build; an ``atexit`` hook freezes every live object just before, so there is nothing to scan. The
collector keeps working until then; only cyclic garbage alive at exit is left to the system, as ``os._exit`` does.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
from collections.abc import Iterator

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


def skip_final_collection() -> None:
    """Register (once per process) the exit hook that spares the final collection."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
