"""Evaluating BUILD files in a forked child process, so that no BUILD file can end or hang the loading process.

starlark-rust cannot always fail softly (an allocation past the memory limit aborts, one operation on a huge value never
reaches the time check). ``in_child`` runs ``work(send)`` in an ``os.fork`` child on a large-stack thread, without core
dumps, memory capped per BUILD file. Outcomes go pickled (``_REDUCERS``) to a file the parent reads when a pipe wakes
it: the child never waits for the parent. It imports no rules module: it asks the parent to (``trusted.ASK_PARENT``) and
ends, so rule implementations live in the parent only. ``print()`` lines go to the parent; stdout and stderr go to a
scratch file that explains a death. A child that dies or is silent past the budget plus ``KILL_GRACE_SECONDS`` (killed)
yields a ``ChildDied``: the caller reports it at the BUILD file and forks again. An exception of ``work`` (a bug) is
raised in the parent."""

from __future__ import annotations

import contextlib
import copyreg
import faulthandler
import logging
import os
import pickle
import re
import resource
import select
import signal
import struct
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import IO, Any, NoReturn

from marinbuild.core.labels import Label
from marinbuild.load import limits, trusted
from marinbuild.load.rules import RuleType
from marinbuild.load.target import Target

__all__ = ["KILL_GRACE_SECONDS", "ChildDied", "in_child"]

KILL_GRACE_SECONDS = 2.0
"""How long past the time budget the parent waits before it kills a child that sends nothing: the child stops
itself, at the line running, when it can (``Evaluator``)."""

_HEADER = struct.Struct("<cQ")  # a frame: its kind, its length, its pickled body
_RESULT, _PRINT, _IMPORT, _RAISE = b"r", b"p", b"i", b"x"
_ALLOC_FAILED = re.compile(rb"memory allocation of (\d+) bytes failed")
_log = logging.getLogger("marinbuild.build")


class ChildDied:
    """The child ended, or was stopped, before it finished: ``message`` says how."""

    def __init__(self, message: str) -> None:
        self.message = message


def in_child(work: Callable[[Callable[[Any], None]], None], budget: float) -> Iterator[Any]:
    """What ``work(send)``, run in a forked child, sends, in order (see the module docstring)."""
    read_fd, write_fd = os.pipe()
    frames = tempfile.TemporaryFile(prefix="marinbuild-eval-")  # the child never waits for the parent to read
    scratch = tempfile.TemporaryFile(prefix="marinbuild-eval-")
    pid = os.fork()
    if pid == 0:
        _child(work, read_fd, write_fd, frames.fileno(), scratch.fileno())
    os.close(write_fd)
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    status: int | None = None
    prints: list[str] = []  # of the package evaluated: logged with its outcome, dropped if it is evaluated again
    offset = 0
    try:
        deadline = time.monotonic() + budget + KILL_GRACE_SECONDS
        while status is None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                os.kill(pid, signal.SIGKILL)
                status = os.waitpid(pid, 0)[1]
                _log_all(prints)
                yield ChildDied(limits.time_message(budget))
                return
            if poller.poll(min(wait, 1.0) * 1000):
                if not os.read(read_fd, 1 << 16):  # the child's end
                    status = os.waitpid(pid, 0)[1]
            else:  # nothing for a second: the child may have ended with the pipe still open in another process
                ended, ended_status = os.waitpid(pid, os.WNOHANG)
                if ended:
                    status = ended_status
            while True:  # the frames written whole so far
                header = os.pread(frames.fileno(), _HEADER.size, offset)
                size = _HEADER.unpack(header)[1] if len(header) == _HEADER.size else -1
                body = os.pread(frames.fileno(), size, offset + _HEADER.size) if size >= 0 else b""
                if len(body) != size:
                    break
                offset += _HEADER.size + size
                kind, value = header[:1], pickle.loads(body)
                if kind == _RESULT:
                    _log_all(prints)
                    yield value
                    deadline = time.monotonic() + budget + KILL_GRACE_SECONDS
                elif kind == _PRINT:
                    prints.append(value)
                elif kind == _IMPORT:
                    with contextlib.suppress(trusted.RulesModuleError):  # the next child raises it, located
                        trusted.import_rules_module(*value)
                else:
                    raise value
        if status:
            _log_all(prints)
            yield ChildDied(_death(status, scratch))
    finally:
        os.close(read_fd)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        frames.close()
        scratch.close()


def _log_all(prints: list[str]) -> None:
    for text in prints:
        _log.info("%s", text)
    prints.clear()


def _death(status: int, scratch: IO[bytes]) -> str:
    """Why the child ended with ``status``: Rust's own words in ``scratch`` if it failed to allocate."""
    size = os.fstat(scratch.fileno()).st_size
    failed = _ALLOC_FAILED.search(os.pread(scratch.fileno(), 65536, max(0, size - 65536)))
    if failed is not None:
        return (
            f"evaluation aborted: it asked for {int(failed.group(1)):,} bytes at once, more than the memory limit "
            "leaves ([tool.marinbuild] eval_memory_mb; see 'Limits' in docs/build-files.md)"
        )
    if os.WIFSIGNALED(status):
        how = f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    else:
        how = f"exit status {os.waitstatus_to_exitcode(status)}"
    return f"evaluation aborted: the process evaluating this file ended ({how}); see 'Limits' in docs/build-files.md"


def _child(
    work: Callable[[Callable[[Any], None]], None], read_fd: int, write_fd: int, frames: int, scratch: int
) -> NoReturn:
    code = 1

    def write(kind: bytes, body: Any) -> None:  # a frame to the file, then a byte to wake the parent
        data = pickle.dumps(body, pickle.HIGHEST_PROTOCOL)
        view = memoryview(_HEADER.pack(kind, len(data)) + data)
        while view:
            view = view[os.write(frames, view) :]
        os.write(write_fd, b".")

    try:
        os.close(read_fd)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it; the parent handles its KeyboardInterrupt
        os.dup2(scratch, 1)
        os.dup2(scratch, 2)
        os.environ["RUST_BACKTRACE"] = "0"  # a panic's hook must not walk the stack while memory is exhausted
        faulthandler.disable()  # its report of an abort would go to the fd it was given (the parent's stderr)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        for cls, reducer in _REDUCERS.items():
            copyreg.pickle(cls, reducer)

        def ask_parent(*module: Any) -> NoReturn:
            write(_IMPORT, module)
            os._exit(0)

        class Forward(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                write(_PRINT, record.getMessage())

        trusted.ASK_PARENT.append(ask_parent)
        _log.handlers, _log.propagate = [Forward()], False
        raised: list[BaseException] = []

        def run() -> None:
            try:
                work(lambda outcome: write(_RESULT, outcome))
            except BaseException as exc:
                raised.append(exc)

        threading.stack_size(limits.STACK_BYTES)
        thread = threading.Thread(target=run, name="marinbuild-starlark")
        thread.start()
        thread.join()
        if raised:
            raise raised[0]
        code = 0
    except BaseException as exc:  # a bug, not a BUILD file's mistake: raised in the parent
        exc.add_note("in the process evaluating BUILD files:\n" + "".join(traceback.format_exception(exc)))
        write(_RAISE, exc)
    finally:
        os._exit(code)


def _rule_at(module: str, name: str) -> RuleType:
    rule: RuleType = getattr(sys.modules[module], name)
    return rule


_REDUCERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    RuleType: lambda rule: (_rule_at, rule.home),
    Target: lambda t: (Target, (t.label, t.rule, t.attrs, t.site, t.deps, t.srcs, t.source_paths, t.order, t.pinned)),
    Label: lambda label: (Label, (label.package, label.name, label.repo)),
}
"""How the child pickles: a rule type by reference (``RuleType.home``, set when its rules module is imported); a target
and a label by their constructor's arguments (half the time of pickle's default for a slotted class, both ways)."""
