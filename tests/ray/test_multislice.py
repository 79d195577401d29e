"""train_lm on two TPU slices at once (multislice), on a real local Ray cluster whose nodes look like v4-8 hosts.

The session's cluster has one single-host v4-8 slice (conftest); this module adds two more, each a node with
``TPU: 4``, ``TPU-v4-8-head`` and the labels Ray's TPU support sets. The quickstart's ``lm`` asks for
``{"tpu": "v4-8", "slices": 2}``: ``ray.util.tpu`` reserves two slices together, one process runs on each, as
one JAX job of two processes on CPU, each with its slice's MEGASCALE variables.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from ml.qs_workspace import HAVE_LEVANTER, Workspace, make_workspace
from slice_runs import build, lm_folders, process_env, train_losses, training_process, wait_for_checkpoint

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not HAVE_LEVANTER, reason="levanter is not installed (the ml extra)"),
]

LM = "//experiments/quickstart:lm"
STEPS = 20


@pytest.fixture(scope="module")
def two_more_slices(ray_cluster):
    nodes = [ray_cluster.add_tpu_slice("v4-8", f"fake-v4-8-{n}", hosts=1, num_cpus=2)[0] for n in ("b", "c")]
    try:
        yield ray_cluster
    finally:
        ray_cluster.remove_nodes(nodes)


@pytest.fixture(scope="module")
def ws(two_more_slices, tmp_path_factory) -> Workspace:
    ws = make_workspace(tmp_path_factory.mktemp("multislice-ws"))
    ws.edit_build(
        '    resources = {"cpu": 2},\n', '    resources = {"tpu": "v4-8", "slices": 2},\n    failure_retries = 1,\n'
    )
    ws.edit_build('"num_train_steps": 30,', f'"num_train_steps": {STEPS},')  # a checkpoint at 10
    return ws


def test_train_lm_runs_one_job_over_two_slices(ws, two_more_slices):
    proc = build(ws, two_more_slices, LM)
    assert proc.returncode == 0, proc.stderr[-5000:]
    (lm,) = lm_folders(ws)
    assert (lm / ".executor_status").read_text() == "SUCCESS"
    summary = json.loads((lm / "summary.json").read_text())
    assert summary["last_step"] == STEPS - 1 and summary["start_step"] == 0
    losses = train_losses(lm, STEPS)
    assert losses[STEPS - 1] < 0.8 * losses[min(losses)]
    for slice_id in (0, 1):  # one process on each slice, each its own log
        log = (lm / "logs" / f"train-slice{slice_id}-host0.log").read_text()
        assert f"trained to step {STEPS - 1}" in log, log[-3000:]
    slice_log = (lm / "logs" / "slice.log").read_text()
    assert slice_log.count("reserving 2 v4-8 slices (1 host x 4 chips each") == 1, slice_log
    assert "attempt 1: succeeded on every host" in slice_log
    runs = [json.loads(line) for line in (lm / "runs.jsonl").read_text().splitlines()]
    assert [r["start_step"] for r in runs] == [0]  # process 0 alone records a start


def test_a_lost_slice_restarts_both_slices_from_the_checkpoint(ws, two_more_slices):
    ws.edit_build("seed = 0,", "seed = 7,")  # a training run of its own (the data steps are built)
    before = lm_folders(ws)
    proc = build(ws, two_more_slices, LM, wait=False)
    try:
        lm = wait_for_checkpoint(ws, before, proc)
        first, second = (training_process(f"MARINBUILD_TPU_SLICE_ID={k}") for k in (0, 1))
        for pid, slice_id in ((first, "0"), (second, "1")):  # every host started with its slice's environment
            env = process_env(pid)
            assert env["MEGASCALE_NUM_SLICES"] == "2" and env["MEGASCALE_SLICE_ID"] == slice_id, env
        assert (
            process_env(first)["MEGASCALE_COORDINATOR_ADDRESS"] == process_env(second)["MEGASCALE_COORDINATOR_ADDRESS"]
        )
        os.kill(second, signal.SIGKILL)  # slice 1's process lost, as a preemption would
        out, err = proc.communicate(timeout=800)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        ws.edit_build("seed = 7,", "seed = 0,")
    assert proc.returncode == 0, err[-5000:]
    assert (lm / ".executor_status").read_text() == "SUCCESS"
    runs = [json.loads(line) for line in (lm / "runs.jsonl").read_text().splitlines()]
    assert len(runs) == 2 and runs[0]["start_step"] == 0
    resumed = runs[1]["start_step"]
    assert resumed >= 11 and runs[1]["checkpoint"].endswith(f"step-{resumed - 1}")  # both resumed, not from 0
    slice_log = (lm / "logs" / "slice.log").read_text()
    assert "attempt 1: preempted" in slice_log and "attempt 2: succeeded on every host" in slice_log, slice_log
    assert slice_log.count("reserving 2 v4-8 slices") == 2  # both slices reserved again, together
    for slice_id in (0, 1):  # the restarted attempt ran on both slices
        assert (lm / "logs" / f"train-slice{slice_id}-host0.log").read_text().count(f"trained to step {STEPS - 1}") == 1
