"""Running ``kill_build.py`` in a subprocess: listing its fault points, killing it at one, rerunning it, checking it."""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

SCRIPT = str(Path(__file__).with_name("kill_build.py"))
RUN_TIMEOUT = 60.0
"""Seconds one run of the small build may take (it takes well under one): less than the 90 s stale time, so a run
that waits for a dead runner's lease fails here instead of passing slowly."""


@dataclass
class Run:
    code: int
    result: dict
    stderr: str


def run(prefix: str, *flags: str, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT) -> Run:
    proc = subprocess.run(
        [sys.executable, SCRIPT, prefix, *flags],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    lines = proc.stdout.strip().splitlines()
    return Run(proc.returncode, json.loads(lines[-1]) if lines else {}, proc.stderr)


def fault_points(prefix: str, *flags: str) -> list[str]:
    """The fault points a build from nothing passes, in order (the build is made in ``prefix``)."""
    log = prefix.rstrip("/") + ".points"
    run(prefix, *flags, env={"MARINBUILD_FAULT_POINT_LOG": log})
    with open(log) as f:
        return [line for line in f.read().splitlines() if line]


def at_point(points: list[str], n: int) -> str:
    """``MARINBUILD_KILL_AT_POINT`` for the ``n``-th (from 1) of the listed ``points``: that point by name and by how
    many times the name was passed, so the same point is hit however the build's threads interleave."""
    name = points[n - 1]
    return f"{points[:n].count(name)}:{name}"


def kill_at(prefix: str, points: list[str], n: int, *flags: str) -> Run:
    """Run the build and SIGKILL it at the ``n``-th of its listed fault ``points``."""
    got = run(prefix, *flags, env={"MARINBUILD_KILL_AT_POINT": at_point(points, n)})
    assert got.code == -signal.SIGKILL, f"not killed at point {n} ({points[n - 1]}): {got}"
    return got


def stop_at(prefix: str, points: list[str], n: int, *flags: str) -> subprocess.Popen:
    """Start the build and wait until it stops itself (SIGSTOP) at the ``n``-th of its listed fault ``points``."""
    proc = subprocess.Popen(
        [sys.executable, SCRIPT, prefix, *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "MARINBUILD_KILL_AT_POINT": at_point(points, n), "MARINBUILD_FAULT_SIGNAL": "STOP"},
    )
    while _state(proc.pid) != "T":
        assert proc.poll() is None, "the build ended without reaching the fault point"
        time.sleep(0.01)
    return proc


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def step_folder(prefix: str, name: str) -> str:
    (found,) = glob.glob(os.path.join(prefix, f"{name}-*"))
    return found


def outputs(prefix: str) -> dict[str, str]:
    """Every step's status and out.txt, by step name: what a correct build leaves."""
    found = {}
    for folder in sorted(glob.glob(os.path.join(prefix, "*-*"))):
        name = os.path.basename(folder).rsplit("-", 1)[0]
        status = Path(folder, ".executor_status").read_text() if os.path.exists(f"{folder}/.executor_status") else None
        out = Path(folder, "out.txt").read_text() if os.path.exists(f"{folder}/out.txt") else None
        found[name] = f"{status} {out}"
    return found
