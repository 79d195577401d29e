"""Limits on what the Starlark evaluator is given: file size, nesting, call depth and time.

Starlark-rust parses and compiles recursively, so a file nested deeply enough (``-`` or
``(`` or ``lambda:`` repeated a hundred thousand times) would overflow the thread's stack
and crash the process. Before a file is parsed it is therefore checked:

- its size: at most ``MAX_FILE_BYTES``;
- it must be UTF-8 text;
- a bound on its nesting: the count of the characters and keywords that can open a level
  (brackets, operators, ``.``, ``:``, ``lambda``, ``def``, ``not``, ``if``...; weighted by what a
  level of each costs the evaluator), at most ``MAX_NESTING``. The count includes those
  inside strings and comments, so it is an upper bound of the real depth.

Files are evaluated on a thread whose stack (``STACK_BYTES``) holds ``MAX_NESTING`` levels
of the costliest kind with room to spare (``marinbuild.load.stack``). At run time, the
Starlark call stack is capped at ``MAX_CALL_DEPTH`` frames and a BUILD file's evaluation
(with the files it loads) at the workspace's ``eval_budget_seconds`` (default
``DEFAULT_BUDGET_SECONDS``), checked by Starlark about every thousand instructions.

Memory: at those checks, the process may have grown by at most ``memory_budget()`` since the
BUILD file started: its resident memory by ``DEFAULT_MEMORY_BYTES``, or, under an address-space
limit (``RLIMIT_AS``, e.g. ``ulimit -v``), its address space by a quarter of what the limit leaves
(at most that much). Memory taken by importing a rules module does not count. Past it the
evaluation stops with a located error. A quarter, because Starlark's heap grows by
doubling: some size it reaches lies between a quarter and a half of what is left, where the
check sees it and the next doubling still fits. One instruction may still ask for more than is
left: a string or list doubled makes starlark-rust panic ("out of memory"), which the evaluator
reports at the file (the panic's text is kept off stderr, ``panics``); a repetition past the
process's limit (``"x" * 2000000000``) aborts the process in Rust's allocator. Values are bounded
separately where starlark-rust would write them out (``exposed.MAX_VALUE_ELEMENTS``).
"""

from __future__ import annotations

import os
import resource
from typing import Any

from marinbuild.load.errors import BuildFileError, Location

__all__ = [
    "DEFAULT_BUDGET_SECONDS",
    "DEFAULT_MEMORY_BYTES",
    "MAX_CALL_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NESTING",
    "STACK_BYTES",
    "RESIDENT",
    "SIZE",
    "budget_seconds",
    "check_source",
    "memory_budget",
    "memory_used",
]

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
    """An upper bound of ``data``'s syntactic nesting, in units of one plain level (see the module docstring).

    Every level of an expression needs a bracket, an operator, a ``.`` or one of the keywords;
    every level of a block needs a ``:``. All are counted, wherever they are.
    """
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
    value = config.get("eval_budget_seconds", DEFAULT_BUDGET_SECONDS)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise BuildFileError(
            "pyproject.toml", 1, 1, f"[tool.marinbuild] eval_budget_seconds must be a positive number, got {value!r}"
        )
    return float(value)


_statm: list[int] = []  # [pid, fd]: /proc/self/statm kept open (reopened in a forked child, whose "self" differs)
SIZE, RESIDENT = 0, 1
"""Fields of ``/proc/self/statm``: the address space, the resident memory."""


def memory_used(field: int) -> int | None:
    """The process's address space (``SIZE``) or resident memory (``RESIDENT``) in bytes, from
    ``/proc/self/statm``; None where there is no ``/proc``."""
    pid = os.getpid()
    try:
        if not _statm or _statm[0] != pid:
            _statm[:] = [pid, os.open("/proc/self/statm", os.O_RDONLY)]
        return int(os.pread(_statm[1], 64, 0).split()[field]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


def memory_budget() -> tuple[int, int] | None:
    """What to watch while a BUILD file is evaluated: ``(field, the value past which evaluation stops)``, or None
    without ``/proc``. Under an address-space limit, the address space (what the limit counts) may grow by a
    quarter of what is left (at most ``DEFAULT_MEMORY_BYTES``); without one, resident memory by
    ``DEFAULT_MEMORY_BYTES`` (address space alone grows by gigabytes when a library reserves thread arenas)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    field = RESIDENT if soft == resource.RLIM_INFINITY else SIZE
    used = memory_used(field)
    if used is None:
        return None
    if field == RESIDENT:
        return field, used + DEFAULT_MEMORY_BYTES
    return field, used + max(0, min(DEFAULT_MEMORY_BYTES, (soft - used) // 4))
