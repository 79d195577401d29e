"""Ray's own messages in a build: to a log file always, to the console only when verbose.

A build on Ray prints its tasks' output (``(name pid=N) line``), Ray's own lines (``(raylet)``, C++ records, crash
dumps, ``INFO worker.py:123 --``) and the driver's ``ray`` logger. All go to the log file; Ray's own reach the console
only when verbose (``-v``, ``MARINBUILD_VERBOSE=1``), the first kept off saying where the log is. No colour codes off a
terminal."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, TextIO

logger = logging.getLogger("marinbuild")

VERBOSE_ENV = "MARINBUILD_VERBOSE"
"""Set to 1 (``marinbuild -v`` sets it) to show Ray's own messages and every line of the ML helper processes."""

RAY_PROCESSES = frozenset(
    "raylet gcs_server autoscaler monitor dashboard dashboard_agent runtime_env_agent log_monitor".split()
)
"""``pid`` values Ray gives the output of its own processes (not a task's)."""

_RAY_LINE = re.compile(
    r"^\s*(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ [DIWEFC] \d+ \d+\]"  # C++ log records
    r"|\*\*\* SIG\w+ received"  # crash dumps
    r"|PC: @|@ +0x[0-9a-f]+ "  # their frames
    r"|\[\w+\.cc ?: ?\d+\] RAW:"  # abseil's raw log
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\w+\.py:\d+ --)"  # Python records
)
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def verbose_from_env() -> bool:
    return os.environ.get(VERBOSE_ENV, "").lower() in ("1", "true", "yes")


def default_log_path(workspace: str | os.PathLike[str] | None) -> Path:
    """``<workspace>/.marinbuild/logs/ray.log``, or ``marinbuild-ray.log`` in the temporary folder."""
    if workspace is not None:
        return Path(workspace) / ".marinbuild" / "logs" / "ray.log"
    return Path(tempfile.gettempdir()) / "marinbuild-ray.log"


def is_ray_line(line: str, pid: Any = None) -> bool:
    """Whether ``line`` (printed by process ``pid``) is Ray's own message rather than a step's output."""
    return str(pid) in RAY_PROCESSES or bool(_RAY_LINE.match(_ANSI.sub("", line)))


class RayLog:
    """Where Ray's lines go in this process (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str], verbose: bool, console: TextIO | None = None):
        self.path = Path(path)
        self.verbose = verbose
        self.console = console
        self._lock = threading.Lock()
        self._file: TextIO | None = None
        self._told = False
        self._local_ip: str | None = None  # lines from this node's processes go without ``ip=`` (as Ray's)

    def write_log(self, text: str) -> None:
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (kept open)
                self._file.write(f"--- marinbuild pid {os.getpid()}: Ray's messages of this build\n")
            self._file.write(_ANSI.sub("", text))
            self._file.flush()

    def _console(self, text: str) -> None:
        out = self.console if self.console is not None else sys.stderr
        if not out.isatty():
            text = _ANSI.sub("", text)
        with contextlib.suppress(ValueError, OSError):
            out.write(text)
            out.flush()

    def _kept_off(self) -> None:
        if not self._told:
            self._told = True
            self._console(f"marinbuild: Ray's own messages go to {self.path} (-v shows them here)\n")

    def task_output(self, data: dict[str, Any]) -> None:
        """One batch of lines Ray forwards from a process of the cluster (Ray's ``print_logs`` record)."""
        pid = data.get("pid")
        name = data.get("actor_name") or data.get("task_name") or ""
        where = f", ip={data['ip']}" if data.get("ip") and data.get("ip") != self._local_ip else ""
        if str(pid) in RAY_PROCESSES:
            prefix = f"({pid}{where}) "
        else:
            prefix = f"({name} pid={pid}{where}) " if name else f"(pid={pid}{where}) "
        lines = data.get("lines", [])
        shown = [line for line in lines if self.verbose or not is_ray_line(line, pid)]
        if len(shown) < len(lines):
            self._kept_off()
        if lines:
            self.write_log("".join(f"{prefix}{line}\n" for line in lines))
        if shown:
            self._console("".join(f"{prefix}{line}\n" for line in shown))

    def install(self) -> None:
        """Route Ray's forwarded output and the ``ray`` logger of this process here."""
        try:
            import ray

            self._local_ip = ray.util.get_node_ip_address()
        except Exception:
            logger.debug("could not read this node's address", exc_info=True)
        self._route_task_output()
        self._route_ray_logger()

    def _route_task_output(self) -> None:
        try:
            from ray._private import worker as ray_worker

            dispatcher = ray_worker.global_worker_stdstream_dispatcher
            if "ray_print_logs" not in [name for name, _ in dispatcher.handlers]:
                return  # log_to_driver=False
            dispatcher.remove_handler("ray_print_logs")
            dispatcher.add_handler("ray_print_logs", self.task_output)
        except Exception:  # a Ray without these internals: its output stays where Ray puts it
            logger.debug("could not route Ray's task output", exc_info=True)

    def _route_ray_logger(self) -> None:
        ray_logger = logging.getLogger("ray")
        handler = _LogFileHandler(self)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        if not self.verbose:
            for old in list(ray_logger.handlers):
                if isinstance(old, logging.StreamHandler) and not isinstance(old, logging.FileHandler):
                    ray_logger.removeHandler(old)
        ray_logger.addHandler(handler)


class _LogFileHandler(logging.Handler):
    """A ``logging`` handler writing to a ``RayLog``'s file (and saying once where that is when not verbose)."""

    def __init__(self, log: RayLog):
        super().__init__()
        self.log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.log.write_log(self.format(record) + "\n")
            if not self.log.verbose and record.levelno >= logging.WARNING:
                self.log._kept_off()
        except Exception:
            self.handleError(record)
