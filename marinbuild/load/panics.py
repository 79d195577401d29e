"""Keeping starlark-rust's panic text off the terminal while a BUILD file is evaluated.

When starlark-rust panics (it does when an allocation of its heap fails: "out of memory"), Rust's
panic hook writes a few lines to file descriptor 2 before pyo3 turns the panic into a Python
exception, which the evaluator reports as one located error. ``quiet_panics`` therefore points
descriptor 2 at a scratch file while a BUILD file is evaluated, then writes what was captured
back to the real stderr without the panic blocks (``strip_panics``): the user's ``print()`` lines
come out, only later. It also sets ``RUST_BACKTRACE=0`` meanwhile: with backtraces on, the hook
walks and symbolises the stack while memory is exhausted, and can abort or block the process
for good. Rust reads that variable at the first panic of the process and keeps the answer, so a
panic inside evaluation leaves backtraces off for the rest of the process; otherwise the user's
value is back as soon as evaluation ends.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

__all__ = ["quiet_panics", "strip_panics"]

_PANIC = re.compile(
    rb"\n?thread '[^'\n]*'(?: \(\d+\))? panicked at [^\n]*\n[^\n]*(?:\n|$)"
    rb"(?:note: run with `RUST_BACKTRACE=[^\n]*(?:\n|$))?"
)

# One scratch file per process (evaluation runs on one thread, ``stack``), emptied after each use.
_scratch: list[IO[bytes]] = []


def strip_panics(data: bytes) -> bytes:
    """``data`` without Rust's panic messages (``thread '...' panicked at ...``, the message, the note)."""
    return _PANIC.sub(b"", data)


def _flush() -> None:
    if sys.stderr is not None:
        sys.stderr.flush()


@contextmanager
def quiet_panics() -> Iterator[None]:
    """Evaluate within: Rust panic text is dropped from stderr, the rest is written out on leaving."""
    _flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep clean
        yield
        return
    if not _scratch:
        _scratch.append(tempfile.TemporaryFile(prefix="marinbuild-stderr-"))
    scratch = _scratch[0]
    backtrace = os.environ.get("RUST_BACKTRACE")
    os.environ["RUST_BACKTRACE"] = "0"
    os.dup2(scratch.fileno(), 2)
    try:
        yield
    finally:
        _flush()
        os.dup2(saved, 2)
        os.close(saved)
        if backtrace is None:
            del os.environ["RUST_BACKTRACE"]
        else:
            os.environ["RUST_BACKTRACE"] = backtrace
        size = os.lseek(scratch.fileno(), 0, os.SEEK_CUR)
        if size:
            data = os.pread(scratch.fileno(), size, 0)
            os.ftruncate(scratch.fileno(), 0)
            os.lseek(scratch.fileno(), 0, os.SEEK_SET)
            kept = memoryview(strip_panics(data))
            while kept:
                kept = kept[os.write(2, kept) :]
