"""Limits on what the Starlark evaluator is given: file size, nesting, call depth, time and memory.

Starlark-rust parses recursively, so a deeply nested file would overflow the thread's stack and crash. Before parsing, a
file must be at most ``MAX_FILE_BYTES``, UTF-8, and have a nesting bound (the weighted count of characters and keywords
that can open a level, strings and comments included, so an upper bound) of at most ``MAX_NESTING``. Files are evaluated
on a thread whose stack (``STACK_BYTES``) holds that with room to spare, in a child process (``marinbuild.load.child``),
with the Starlark call stack capped at ``MAX_CALL_DEPTH``, a BUILD file's evaluation at ``eval_budget_seconds`` (checked
every thousand instructions or so), and its memory growth at ``eval_memory_mb`` (``RLIMIT_AS``). Evaluation stops with a
located error once half the memory is used (Starlark's heap grows by doubling); one operation past the cap ends the
child, which the parent reports at the file."""

from __future__ import annotations

import os
import resource
from typing import Any

from marinbuild.load.errors import BuildFileError, Location

__all__ = [
    "DEFAULT_BUDGET_SECONDS", "DEFAULT_MEMORY_BYTES", "MAX_CALL_DEPTH", "MAX_FILE_BYTES", "MAX_NESTING",
    "MEMORY_MESSAGE", "STACK_BYTES", "budget_seconds", "cap_memory", "check_source", "memory_bytes", "memory_used",
    "time_message"
]  # fmt: skip

MAX_FILE_BYTES = 2 * 1024 * 1024
MAX_NESTING = 100_000
STACK_BYTES = 1024 * 1024 * 1024
MAX_CALL_DEPTH = 200
DEFAULT_BUDGET_SECONDS = 30.0
DEFAULT_MEMORY_BYTES = 2 * 1024 * 1024 * 1024
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

_LEVEL_CHARS = b"([{-+~.*/%<>|&^@!=:"
_NOT_LEVEL = bytes(c for c in range(256) if c not in _LEVEL_CHARS)
_HEAVY = (b"lambda", b"def")  # a level of these costs the evaluator about ten plain ones
_WORDS = (b"not", b"if", b"else", b"and", b"or", b"for", b"in")


def nesting_bound(data: bytes) -> int:
    """An upper bound of ``data``'s nesting: each level needs a bracket, operator, ``.``, keyword or ``:``."""
    total = len(data.translate(None, _NOT_LEVEL))
    for word in _WORDS:
        total += data.count(word)
    for word in _HEAVY:
        total += 10 * data.count(word)
    return total


def check_source(data: bytes, display: str) -> str:
    """``data`` as text, or a located error if it is too large, not UTF-8 or nested too deeply."""
    if len(data) > MAX_FILE_BYTES:
        raise BuildFileError(
            display, 1, 1, f"file too large: {len(data)} bytes (at most {MAX_FILE_BYTES}); split it into several files"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise BuildFileError(display, line, col, "the file is not UTF-8 text") from None
    bound = nesting_bound(data)
    if bound > MAX_NESTING:
        raise BuildFileError.at(
            Location(display, 1, 1),
            f"file too deeply nested or too complex to evaluate safely (nesting bound {bound} > {MAX_NESTING}): "
            "split its expressions and functions into smaller ones",
        )
    return text


def budget_seconds(config: dict[str, Any]) -> float:
    """The evaluation budget of one BUILD file: ``[tool.marinbuild] eval_budget_seconds``, a positive number."""
    return _positive(config, "eval_budget_seconds", DEFAULT_BUDGET_SECONDS)


def memory_bytes(config: dict[str, Any]) -> int:
    """How much a BUILD file's evaluation may allocate: ``[tool.marinbuild] eval_memory_mb``, a positive number."""
    return int(_positive(config, "eval_memory_mb", DEFAULT_MEMORY_BYTES / 2**20) * 2**20)


def _positive(config: dict[str, Any], key: str, default: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise BuildFileError("pyproject.toml", 1, 1, f"[tool.marinbuild] {key} must be a positive number: {value!r}")
    return float(value)


def time_message(budget: float) -> str:
    return (
        f"evaluation stopped: it ran longer than the budget of {budget:g} s ([tool.marinbuild] eval_budget_seconds); "
        "loading must be quick: look for a loop that does not end, or an operation on a huge value"
    )


MEMORY_MESSAGE = (
    "evaluation stopped: it allocated more memory than a BUILD file may ([tool.marinbuild] eval_memory_mb; see "
    "'Limits' in docs/build-files.md); look for a value that grows without bound"
)

_statm: list[int] = []  # [pid, fd]: /proc/self/statm kept open (reopened in a forked child, whose "self" differs)
_found: list[int] = []  # the address-space limit the process had before ``cap_memory`` first changed it


def memory_used() -> int | None:
    """The process's address space in bytes, from ``/proc/self/statm``; None where there is no ``/proc``."""
    pid = os.getpid()
    try:
        if not _statm or _statm[0] != pid:
            _statm[:] = [pid, os.open("/proc/self/statm", os.O_RDONLY)]
        return int(os.pread(_statm[1], 64, 0).split()[0]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def cap_memory(room: int) -> int | None:
    """For the evaluating child: cap the address space (``RLIMIT_AS``) at its size now plus ``room`` (or its lower
    limit); the size past which evaluation stops (half way), None without ``/proc``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if not _found:
        _found.append(soft)
    used = memory_used()
    cap = _found[0]
    if used is not None and (cap == resource.RLIM_INFINITY or used + room < cap):
        cap = used + room
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return None if used is None or cap == resource.RLIM_INFINITY else used + (cap - used) // 2
