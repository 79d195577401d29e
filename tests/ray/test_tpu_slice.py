"""train_lm on a multi-host TPU slice, on a real local Ray cluster whose nodes look like a 2-host v4-16 slice.

The session's cluster gets, for this module, the 2 hosts of a fake slice ``fake-v4-16``
(``RayCluster.add_tpu_slice``): ``TPU: 4`` each, ``TPU-v4-16-head`` on worker 0, the labels and
environment Ray's TPU support sets on real TPU VMs, so ``ray.util.tpu`` reserves them as a slice.
The quickstart (tests/ml's workspace) is built from the CLI with its ``lm`` asking for
``tpu("v4-16")``: one JAX process per fake host, JAX's CPU collectives between them.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal

import pytest
from ml.qs_workspace import HAVE_LEVANTER, Workspace, make_workspace
from slice_runs import build, lm_folders, train_losses, training_process, wait_for_checkpoint

pytestmark = [
    pytest.mark.timeout(900),
    pytest.mark.skipif(not HAVE_LEVANTER, reason="levanter is not installed (the ml extra)"),
]

LM = "//experiments/quickstart:lm"
STEPS = 20
ON_SLICE = ('    resources = {"cpu": 2},\n', '    resources = {"tpu": "v4-16"},\n    failure_retries = 1,\n')


@pytest.fixture(scope="module")
def fake_slice(ray_cluster):
    nodes = ray_cluster.add_tpu_slice("v4-16", "fake-v4-16", hosts=2, num_cpus=2)
    try:
        yield ray_cluster
    finally:
        ray_cluster.remove_nodes(nodes)


@pytest.fixture(scope="module")
def ws(fake_slice, tmp_path_factory) -> Workspace:
    ws = make_workspace(tmp_path_factory.mktemp("slice-ws"))
    ws.edit_build(*ON_SLICE)
    ws.edit_build('"num_train_steps": 30,', f'"num_train_steps": {STEPS},')  # a checkpoint at 10, evaluations at 10
    return ws


def test_a_slice_the_cluster_lacks_fails_with_one_line_after_slice_wait(ws, fake_slice):
    ws.edit_build('"tpu": "v4-16"', '"tpu": "v4-32"')
    ws.edit_build("    failure_retries = 1,\n", "    failure_retries = 1,\n    slice_wait = 3,\n")
    try:
        proc = build(ws, fake_slice, LM, "--build_event_json_file", "events.jsonl")
    finally:
        ws.edit_build("    slice_wait = 3,\n", "")
        ws.edit_build('"tpu": "v4-32"', '"tpu": "v4-16"')
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = (
        "train_lm //experiments/quickstart:lm: no free TPU v4-32 slice (4 hosts x 4 chips) on the Ray cluster "
        "after waiting 3s (train_lm's slice_wait); the cluster has TPU slices: v4-16 x1 (2 hosts)"
    )
    assert line in proc.stderr, proc.stderr[-3000:]
    events = [json.loads(e) for e in (ws.root / "events.jsonl").read_text().splitlines()]
    waits = [e["detail"] for e in events if e["kind"] == "progress" and (e["detail"] or "").startswith("waiting")]
    assert waits and all(w.startswith("waiting for a free TPU v4-32 slice: ") and w.endswith(" of 3 s") for w in waits)
    (lm,) = lm_folders(ws)
    assert (lm / ".executor_status").read_text().strip() == "FAILED"
    assert not (lm / "logs" / "train-host0.log").exists()  # no training process started
    shutil.rmtree(lm)


def test_train_lm_runs_one_process_per_host_of_the_slice(ws, fake_slice):
    proc = build(ws, fake_slice, LM)
    assert proc.returncode == 0, proc.stderr[-5000:]
    (lm,) = lm_folders(ws)
    assert (lm / ".executor_status").read_text() == "SUCCESS"  # one status, written once
    summary = json.loads((lm / "summary.json").read_text())
    assert summary["last_step"] == STEPS - 1 and summary["start_step"] == 0
    assert math.isfinite(summary["final_eval"]["eval/loss"])  # levanter's evaluations ran across both processes
    losses = train_losses(lm, STEPS)
    assert all(math.isfinite(v) for v in losses.values()) and losses[STEPS - 1] < 0.8 * losses[min(losses)]
    # every host ran its own process, as one JAX job of 2 processes
    for worker in (0, 1):
        log = (lm / "logs" / f"train-host{worker}.log").read_text()
        assert f"trained to step {STEPS - 1}" in log, log[-3000:]
    slice_log = (lm / "logs" / "slice.log").read_text()
    assert slice_log.count("reserving one v4-16 slice (2 hosts x 4 chips") == 1
    assert "attempt 1: succeeded on every host" in slice_log
    runs = [json.loads(line) for line in (lm / "runs.jsonl").read_text().splitlines()]
    assert [r["start_step"] for r in runs] == [0]  # process 0 alone records a start
    compute = json.loads(next(lm.glob(".marinbuild_compute.*")).read_text())  # what the slice held, 1 attempt
    held = (compute["tpu"], compute["hosts"], compute["chips"], compute["attempts"], compute["preemptions"])
    assert held == ("v4-16", 2, 8, 1, 0)
    assert 0 < compute["tpu_seconds"] <= compute["wall_seconds"]
    assert compute["hours"]["TPU v4 chip-hours"] == round(8 * compute["tpu_seconds"] / 3600, 9)


def test_eval_harness_runs_one_process_per_host_of_the_slice(ws, fake_slice):
    # The quickstart's lm-eval task on the model trained above (built already when the tests run in order).
    tasks = '    task_files = ["tasks/story_object.yaml", "tasks/story_object.jsonl"],\n'
    ws.edit_build(tasks + '    resources = {"cpu": 2},\n', tasks + '    resources = {"tpu": "v4-16"},\n')
    try:
        proc = build(ws, fake_slice, "//experiments/quickstart:story_tasks")
    finally:
        ws.edit_build(tasks + '    resources = {"tpu": "v4-16"},\n', tasks + '    resources = {"cpu": 2},\n')
    assert proc.returncode == 0, proc.stderr[-5000:]
    (out,) = (ws.prefix / "experiments" / "quickstart").glob("story_tasks-*")
    assert (out / ".executor_status").read_text() == "SUCCESS"
    result = json.loads((out / "results.json").read_text())  # written by process 0 alone
    assert result["step"] == STEPS - 1 and result["n_samples"] == {"story_object_0shot": 20}
    assert 0.0 <= result["results"]["story_object_0shot"]["acc"] <= 1.0
    # every host ran its own process, as one JAX job of 2 processes: host 1 computed process 0's batches
    for worker in (0, 1):
        assert (out / "logs" / f"eval-host{worker}.log").exists()
    assert "waiting for eval harness requests from process 0" in (out / "logs" / "eval-host1.log").read_text()
    assert "story_object_0shot: acc" in (out / "logs" / "eval-host0.log").read_text()
    slice_log = (out / "logs" / "slice.log").read_text()
    assert slice_log.count("reserving one v4-16 slice (2 hosts x 4 chips") == 1
    assert "attempt 1: succeeded on every host" in slice_log


def test_a_killed_host_process_restarts_the_slice_from_the_checkpoint(ws, fake_slice):
    ws.edit_build("seed = 0,", "seed = 7,")  # a training run of its own (the data steps are built)
    before = lm_folders(ws)
    proc = build(ws, fake_slice, LM, wait=False)
    try:
        lm = wait_for_checkpoint(ws, before, proc)
        assert (lm / ".executor_status").read_text().strip() == "RUNNING"
        os.kill(
            training_process("MARINBUILD_TPU_WORKER_ID=1"), signal.SIGKILL
        )  # host 1's training process, as a preemption would
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
    assert resumed >= 11 and runs[1]["checkpoint"].endswith(f"step-{resumed - 1}")  # not from step 0
    losses = train_losses(lm, STEPS)  # one run: the resumed run replaced what the lost one logged after its checkpoint
    assert losses[STEPS - 1] < 0.8 * losses[min(losses)]
    slice_log = (lm / "logs" / "slice.log").read_text()
    assert "attempt 1: preempted" in slice_log and "attempt 2: succeeded on every host" in slice_log, slice_log
    compute = json.loads(next(lm.glob(".marinbuild_compute.*")).read_text())
    assert (compute["attempts"], compute["preemptions"], compute["chips"]) == (2, 1, 8)


def test_a_failing_training_ends_failed_after_its_failure_budget(ws, fake_slice):
    # Found by levanter at run time only: 16 examples do not split over 2 devices x 3 per device.
    ws.edit_build('"batch_size": 16,', '"batch_size": 16,\n        "per_device_parallelism": 3,')
    try:
        proc = build(ws, fake_slice, LM)
    finally:
        ws.edit_build('"batch_size": 16,\n        "per_device_parallelism": 3,', '"batch_size": 16,')
    assert proc.returncode == 1, proc.stderr[-3000:]
    (lm,) = {p for p in lm_folders(ws) if (p / ".executor_status").read_text().strip() != "SUCCESS"}
    assert (lm / ".executor_status").read_text().strip() == "FAILED"
    slice_log = (lm / "logs" / "slice.log").read_text()
    assert "attempt 1: failed" in slice_log and "attempt 2: failed" in slice_log and "attempt 3" not in slice_log
    assert "training failed 2 times on a TPU v4-16 slice" in proc.stderr and "failure_retries = 1" in proc.stderr
    host_log = (lm / "logs" / "train-host0.log").read_text()
    assert "per_device_parallelism" in host_log or "divisible" in host_log, host_log[-3000:]


@pytest.mark.parametrize(
    ("returncode", "outcome"),
    [(-signal.SIGKILL, "preempted"), (-signal.SIGTERM, "preempted"), (-signal.SIGABRT, "failed"), (1, "failed")],
)
def test_a_host_killed_from_outside_is_a_preemption_and_its_own_crash_a_failure(returncode, outcome):
    from ray.exceptions import RayTaskError, TaskCancelledError

    from marinbuild.ml.process import MlProcessError
    from marinbuild.ml.slice_run import classify

    assert classify(RayTaskError("run_on_host", "tb", MlProcessError("exited", returncode))) == outcome
    assert classify(TaskCancelledError()) == "cancelled"
