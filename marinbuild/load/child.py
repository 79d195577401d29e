"""Evaluating BUILD files in a forked child process, so that no BUILD file can end or hang the loading process.

Some failures of starlark-rust cannot be caught in the process running it: an allocation the memory
limit refuses aborts the process (``"x" * 2000000000`` under ``ulimit -v``), and one operation on a
huge value (``==`` or ``%`` of a value of 2**50 elements) never returns to the evaluator's time
check. ``in_child`` therefore runs ``work(send)`` (the loader's walk over the packages) in a child
made by ``os.fork`` (cheap: it shares what the parent imported, starlark included), which

- runs ``work`` on a thread whose stack holds the deepest file ``limits.check_source`` lets through,
  with no core dumps, its address space capped per BUILD file (``limits.cap_memory``);
- sends what ``work`` gives ``send`` (each package's targets, or its error) pickled (``_REDUCERS``), a
  rule type as a reference to its rules module, which the parent has imported: the child imports
  none but asks the parent to and ends (``trusted.ASK_PARENT``); the next child, forked once the
  parent imported it, has it. Rule implementations run in the parent only; the child declares targets;
- sends each ``print()`` line as it is logged, which the parent logs on ``marinbuild.build``;
- writes its stdout and stderr (Rust's panic and abort messages) to a scratch file, read only to
  explain the child's death.

``in_child`` yields what the child sends. If the child dies, or sends nothing for the time budget
plus ``KILL_GRACE_SECONDS`` (it is then killed), it yields a ``ChildDied`` saying why and ends: the
caller places that at the BUILD file being evaluated and forks again for the packages left. An
exception ``work`` raises (a bug, not a BUILD file's mistake) is raised in the parent.
"""

from __future__ import annotations

import contextlib
import copyreg
import faulthandler
import fcntl
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

_PIPE_BYTES = 1 << 20
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
    with contextlib.suppress(OSError):  # the child works ahead of the parent's reading by up to this much
        fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    scratch = tempfile.TemporaryFile(prefix="marinbuild-eval-")
    pid = os.fork()
    if pid == 0:
        _child(work, read_fd, write_fd, scratch.fileno())
    os.close(write_fd)
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    status: int | None = None
    try:
        buffer = bytearray()
        deadline = time.monotonic() + budget + KILL_GRACE_SECONDS
        while True:
            if len(buffer) >= _HEADER.size:
                kind, size = _HEADER.unpack_from(buffer)
                if len(buffer) >= _HEADER.size + size:
                    body = pickle.loads(memoryview(buffer)[_HEADER.size : _HEADER.size + size])
                    del buffer[: _HEADER.size + size]
                    if kind == _RESULT:
                        yield body
                        deadline = time.monotonic() + budget + KILL_GRACE_SECONDS
                    elif kind == _PRINT:
                        _log.info("%s", body)
                    elif kind == _IMPORT:
                        with contextlib.suppress(trusted.RulesModuleError):  # the next child raises it, located
                            trusted.import_rules_module(*body)
                    else:
                        raise body
                    continue
            wait = deadline - time.monotonic()
            if wait <= 0:
                os.kill(pid, signal.SIGKILL)
                status = os.waitpid(pid, 0)[1]
                yield ChildDied(limits.time_message(budget))
                return
            if poller.poll(min(wait, 1.0) * 1000):
                chunk = os.read(read_fd, 1 << 20)
                if chunk:
                    buffer += chunk
                    continue
                status = os.waitpid(pid, 0)[1]
            else:  # nothing for a second: the child may have ended with the pipe still open in another process
                ended, ended_status = os.waitpid(pid, os.WNOHANG)
                if not ended:
                    continue
                status = ended_status
            if status:
                yield ChildDied(_death(status, scratch))
            return
    finally:
        os.close(read_fd)
        if status is None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        scratch.close()


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


def _child(work: Callable[[Callable[[Any], None]], None], read_fd: int, write_fd: int, scratch: int) -> NoReturn:
    code = 1
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

        def write(kind: bytes, body: Any) -> None:
            data = pickle.dumps(body, pickle.HIGHEST_PROTOCOL)
            view = memoryview(_HEADER.pack(kind, len(data)) + data)
            while view:
                view = view[os.write(write_fd, view) :]

        def ask_parent(*module: Any) -> NoReturn:
            write(_IMPORT, module)
            os._exit(0)

        trusted.ASK_PARENT.append(ask_parent)

        class Forward(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                write(_PRINT, record.getMessage())

        _log.handlers, _log.propagate = [Forward()], False
        raised: list[BaseException] = []

        def run() -> None:
            try:
                work(lambda outcome: write(_RESULT, outcome))
            except BaseException as exc:
                exc.add_note("in the process evaluating BUILD files:\n" + traceback.format_exc())
                raised.append(exc)

        threading.stack_size(limits.STACK_BYTES)
        thread = threading.Thread(target=run, name="marinbuild-starlark")
        thread.start()
        thread.join()
        if raised:
            write(_RAISE, raised[0])
        else:
            code = 0
    finally:
        os._exit(code)


def _rule_at(module: str, name: str) -> RuleType:
    rule: RuleType = getattr(sys.modules[module], name)
    return rule


_REDUCERS: dict[type, Callable[[Any], tuple[Any, ...]]] = {
    RuleType: lambda rule: (_rule_at, rule.home),
    Target: lambda t: (Target, (t.label, t.rule, t.attrs, t.site, t.deps, t.srcs, t.source_paths, t.order)),
    Label: lambda label: (Label, (label.package, label.name, label.repo)),
}
"""How the child pickles: a rule type by reference (``RuleType.home``, set when its rules module is imported); a
target and a label by their constructor's arguments (half the time of pickle's default for a slotted class, both
ways)."""
