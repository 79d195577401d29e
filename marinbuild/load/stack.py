"""Running Starlark on a thread with a large stack (``limits.STACK_BYTES``).

Starlark-rust parses, compiles and evaluates recursively on the calling thread's stack;
``limits.check_source`` bounds a file's nesting so that it fits in this thread's stack. One
long-lived daemon thread per process runs every load (the Python side waits for it), so
Starlark values cached between loads stay on the thread that made them.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from marinbuild.load.limits import STACK_BYTES

__all__ = ["on_big_stack"]

T = TypeVar("T")

# Process-wide on purpose: one thread (the stack size is set when a thread starts) that every loader shares,
# holding nothing of a finished load (see the module docstring).
_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


def _work() -> None:
    while True:
        fn, future = _jobs.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(fn())
        except BaseException as exc:  # handed to the waiting caller
            future.set_exception(exc)
            del exc
        del fn, future  # nothing of a finished load stays alive here


def _start() -> threading.Thread:
    global _thread
    with _lock:
        if _thread is None:
            previous = threading.stack_size(STACK_BYTES)
            try:
                thread = threading.Thread(target=_work, name="marinbuild-starlark", daemon=True)
                thread.start()
            finally:
                threading.stack_size(previous)
            _thread = thread
    return _thread


def on_big_stack(fn: Callable[[], T]) -> T:
    """``fn()`` run on the large-stack thread (directly when already there)."""
    thread = _thread or _start()
    if threading.current_thread() is thread:
        return fn()
    future: Future[T] = Future()
    _jobs.put((fn, future))
    return future.result()
