"""What the tests of jobs on TPU slices share: building the quickstart on the Ray cluster from the CLI, reading
its training output, and finding a host's training process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from ml.qs_workspace import Workspace
from raycluster import node_env


def build(ws: Workspace, cluster, *args: str, wait: bool = True) -> subprocess.CompletedProcess | subprocess.Popen:
    env = node_env()
    env.pop("MARIN_PREFIX", None)
    env.update(RAY_ADDRESS=cluster.address, HF_HUB_OFFLINE="1")
    command = [sys.executable, "-m", "marinbuild", "--backend", "ray", *args]
    if not wait:
        return subprocess.Popen(
            command,
            cwd=ws.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    return subprocess.run(command, cwd=ws.root, env=env, capture_output=True, text=True, timeout=800)


def lm_folders(ws: Workspace) -> set[Path]:
    return set((ws.prefix / "experiments" / "quickstart").glob("lm-*"))


def train_losses(lm: Path, num_steps: int) -> dict[int, float]:
    """The train losses of ``metrics.jsonl`` by step, checked to read as one run (as one host's run does:
    levanter's first logged step may be 1 or 2, and its last is logged twice)."""
    records = [json.loads(line) for line in (lm / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in records if "train/loss" in r]
    assert steps == sorted(steps), f"steps out of order (left over from a lost run?): {steps}"
    assert steps[0] <= 2 and set(steps) == set(range(steps[0], num_steps)), steps
    return {r["step"]: r["train/loss"] for r in records if "train/loss" in r}


def wait_for_checkpoint(ws: Workspace, before: set[Path], proc: subprocess.Popen) -> Path:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        for lm in lm_folders(ws) - before:
            if (lm / "checkpoints" / "step-10" / "metadata.json").exists():
                return lm
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint at step 10 appeared (build exit code {proc.poll()})")


def training_process(env_entry: str) -> int:
    """The pid of the training process whose environment holds ``env_entry`` (``MARINBUILD_TPU_WORKER_ID=1``)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"marinbuild.ml.train" not in cmdline:
                continue
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if env_entry.encode() in environ:
            return int(pid)
    raise AssertionError(f"no training process with {env_entry} found")


def process_env(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
    return dict(e.split("=", 1) for e in entries if "=" in e)
