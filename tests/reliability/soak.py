"""The kill soak: runners of ``kill_build.py`` racing on one prefix, SIGKILLed at random moments, then a run to the end.

``soak(prefix, rounds, runners, seed)`` runs ``rounds`` rounds; in each, ``runners`` builds start together on the
prefix and each is killed after its own random delay (unless it finished first). Each round starts from what the
last one left (a step built once stays built), so the prefix is cleared of SUCCESS statuses every few rounds to
keep kills landing inside steps. After every round, every step
whose status is SUCCESS must hold the output a clean build makes (no SUCCESS over partial outputs). Then one more
build runs to completion and must succeed with every step's output correct. Steps hold a flock named after them
while they run (``soak_steps``): two live runners in one step is a violation. Returns the figures: kills, runs
that finished, step checks, violations, the longest time a finished run waited on another runner's step.
"""

from __future__ import annotations

import glob
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field

import harness as h

STEP_SLEEP = 0.05
"""Seconds each step's function sleeps: long enough for kills to land inside steps as well as in metadata writes."""


@dataclass
class SoakReport:
    rounds: int = 0
    runners: int = 0
    kills: int = 0
    finished_runs: int = 0
    steps_verified: int = 0
    violations: list[str] = field(default_factory=list)
    longest_wait: float = 0.0
    final_ok: bool = False

    def to_dict(self) -> dict:
        return asdict(self)


def soak(prefix: str, rounds: int, runners: int = 2, seed: int = 0) -> SoakReport:
    """See the module docstring. Each runner is killed after a random delay of up to 3 times what a clean build
    of the graph (process start included) took on this machine just before: kills land from start-up to the end,
    and some runs finish, whatever the machine's load."""
    rng = random.Random(seed)
    report = SoakReport(rounds=rounds, runners=runners)
    work = prefix.rstrip("/") + ".soak"
    os.makedirs(work, exist_ok=True)
    started = time.monotonic()
    golden = _golden(prefix.rstrip("/") + ".golden")
    max_delay = 3.0 * (time.monotonic() - started)
    env = {**os.environ, "MARINBUILD_SOAK_DIR": work}
    for _ in range(rounds):
        procs = [
            subprocess.Popen(
                [sys.executable, h.SCRIPT, prefix, "--sleep", str(STEP_SLEEP)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for _ in range(runners)
        ]
        deadlines = sorted((time.monotonic() + rng.uniform(0, max_delay), i) for i in range(runners))
        for deadline, i in deadlines:
            time.sleep(max(0.0, deadline - time.monotonic()))
            if procs[i].poll() is None:
                procs[i].send_signal(signal.SIGKILL)
        for proc in procs:
            out, _ = proc.communicate(timeout=h.RUN_TIMEOUT)
            if proc.returncode == -signal.SIGKILL:
                report.kills += 1
            else:
                _finished(report, proc.returncode, out)
        _check_built(prefix, golden, report)
        if rng.random() < 0.3:
            _forget_successes(prefix)
    final = subprocess.run(
        [sys.executable, h.SCRIPT, prefix], env=env, capture_output=True, text=True, timeout=h.RUN_TIMEOUT
    )
    _finished(report, final.returncode, final.stdout)
    report.final_ok = final.returncode == 0 and h.outputs(prefix) == golden
    _check_built(prefix, golden, report)
    violations = os.path.join(work, "violations")
    if os.path.exists(violations):
        with open(violations) as f:
            report.violations.extend(f.read().splitlines())
    return report


def _forget_successes(prefix: str) -> None:
    """Remove every SUCCESS status (as ``cache verify`` does for a damaged step): the next round builds again."""
    for folder in glob.glob(os.path.join(prefix, "*-*")):
        path = os.path.join(folder, ".executor_status")
        try:
            with open(path) as f:
                if f.read().strip() == "SUCCESS":
                    os.unlink(path)
        except FileNotFoundError:
            pass


def _golden(prefix: str) -> dict[str, str]:
    got = h.run(prefix)
    assert got.code == 0, got
    return h.outputs(prefix)


def _finished(report: SoakReport, code: int, stdout: str) -> None:
    report.finished_runs += 1
    lines = stdout.strip().splitlines()
    result = json.loads(lines[-1]) if lines else {"ok": False, "error": f"exit {code}, no report", "waits": []}
    if code != 0 or not result["ok"]:
        report.violations.append(f"a run that was not killed failed: {result['error']}")
    report.longest_wait = max([report.longest_wait, *result["waits"]])


def _check_built(prefix: str, golden: dict[str, str], report: SoakReport) -> None:
    """Every step marked SUCCESS holds the output a clean build makes."""
    for name, state in h.outputs(prefix).items():
        if state.startswith("SUCCESS"):
            report.steps_verified += 1
            if state != golden[name]:
                report.violations.append(f"{name}: SUCCESS over {state!r}, expected {golden[name]!r}")
