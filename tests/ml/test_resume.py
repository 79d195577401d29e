"""A training step killed with SIGKILL resumes from its last checkpoint when the build is run again.

The build runs in its own process group; once the first checkpoint of the run is complete
(its ``metadata.json`` exists) the whole group (marinbuild and its training child) gets
SIGKILL, as a preempted machine would. The step is left RUNNING with a lease that goes stale
(``stale_after = 4`` in the test workspace); the next build takes it over, and training
starts from the checkpoint's step, not from 0: ``runs.jsonl`` and the log say so.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from qs_workspace import needs_levanter

pytestmark = [needs_levanter, pytest.mark.timeout(1200)]


def test_sigkill_during_training_resumes_from_checkpoint(quickstart):
    ws = quickstart
    ws.edit_build("seed = 0,", "seed = 7,")  # a training run of its own (the data steps are shared)
    try:
        _kill_then_resume(ws)
    finally:
        ws.edit_build("seed = 7,", "seed = 0,")


def _kill_then_resume(ws) -> None:
    before = set((ws.prefix / "experiments" / "quickstart").glob("lm-*"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "marinbuild", "//experiments/quickstart:lm"],
        cwd=ws.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        checkpoint = None
        while time.monotonic() < deadline and proc.poll() is None:
            new = [p for p in (ws.prefix / "experiments" / "quickstart").glob("lm-*") if p not in before]
            done = [p for p in new if (p / "checkpoints" / "step-10" / "metadata.json").exists()]
            if done:
                checkpoint = done[0]
                break
            time.sleep(0.2)
        assert checkpoint is not None, f"no checkpoint at step 10 appeared (build exit code {proc.poll()})"
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    lm = checkpoint
    assert (lm / ".executor_status").read_text().strip() == "RUNNING"  # never SUCCESS over a partial run
    assert not (lm / "checkpoints" / "step-29").exists()
    killed_at = max(
        int(p.name.split("-")[1]) for p in (lm / "checkpoints").glob("step-*") if (p / "metadata.json").exists()
    )
    assert 10 <= killed_at < 29

    build = ws.build("//experiments/quickstart:lm")
    assert build.code == 0, build.stderr[-5000:]
    assert build.ran == {"experiments/quickstart/lm"}
    runs = [json.loads(line) for line in (lm / "runs.jsonl").read_text().splitlines()]
    # step-N holds the state after step N: the rerun goes on at N + 1, as levanter's own log says
    assert [r["start_step"] for r in runs] == [0, killed_at + 1]
    assert runs[1]["checkpoint"] == str(lm / "checkpoints" / f"step-{killed_at}")
    assert f"resuming from checkpoint {lm / 'checkpoints' / f'step-{killed_at}'}" in build.stderr
    assert f"Resuming training from step {killed_at + 1}" in (lm / "logs" / "train.log").read_text()
    assert (lm / "checkpoints" / "step-29" / "metadata.json").exists()
    assert (lm / ".executor_status").read_text().strip() == "SUCCESS"
    # the metrics read as one run: the resumed part replaced what the killed run logged after its checkpoint
    records = [json.loads(line) for line in (lm / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in records if "train/loss" in r]
    assert train_steps == sorted(train_steps)  # nothing from after the checkpoint is left over from the killed run
    assert set(train_steps) == set(range(train_steps[0], 30))
