"""The Ray backend on a real local Ray cluster (see conftest.py): placement, sharing, retries, failures, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path

import pytest
import ray_steps as rs
from interrupt import default_sigint
from raycluster import HERE, node_env

from marinbuild.core.resources import tpu
from marinbuild.executor import Executor, ExecutorStep, StepFailedError, output_path_of, remote
from marinbuild.run.compute import number
from marinbuild.run.ray_backend import RayBackend, RemoteTraceback, StepLostError
from marinbuild.store import action_cache
from marinbuild.store import status as st
from marinbuild.store.lease import LeaseLostError
from marinbuild.store.status import DamagedFileError
from marinbuild.ui.summary import BuildSummary

pytestmark = pytest.mark.timeout(240)


def make_executor(prefix: str, backend: RayBackend, **kwargs) -> Executor:
    return Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        listeners=[],
        backend=backend,
        **kwargs,
    )


def where(path: str) -> dict:
    return json.loads(Path(path, "where.json").read_text())


def test_tpu_step_lands_on_the_tpu_node(ray_cluster, tpu_node, prefix):
    backend = RayBackend(ray_cluster.address)
    on_tpu = rs.probe("placement/tpu", resources=tpu("v4-8"))
    as_dict = rs.probe("placement/dict", text="d", resources={"TPU": 1, "cpu": 1})
    on_head = rs.probe("placement/head", text="h", resources={"cpu": 2})  # only the head has 2 CPUs
    paths = make_executor(prefix, backend).run([on_tpu, as_dict, on_head])
    assert where(paths[on_tpu])["node_id"] == tpu_node.node_id
    assert where(paths[as_dict])["node_id"] == tpu_node.node_id
    assert where(paths[on_head])["node_id"] == ray_cluster.head.node_id
    assert st.read_status(paths[on_tpu]) == "SUCCESS"
    assert json.loads(Path(paths[on_tpu], ".artifact.json").read_text())["node_id"] == tpu_node.node_id


def test_a_tpu_step_on_ray_records_its_chip_hours_and_a_rerun_reports_them_reused(ray_cluster, tpu_node, prefix):
    step = rs.probe("compute/tpu", resources=tpu("v4-8"))
    summaries = [BuildSummary(), BuildSummary()]
    for summary in summaries:
        executor = make_executor(prefix, RayBackend(ray_cluster.address))
        executor.listeners = [summary]
        paths = executor.run([step])
    record = json.loads(next(Path(paths[step]).glob(".marinbuild_compute.*")).read_text())
    held = (record["backend"], record["tpu"], record["hosts"], record["chips"], record["cpus"], record["attempts"])
    assert held == ("ray", "v4-8", 1, 4, 1, 1)
    wall = record["wall_seconds"]
    assert record["hours"] == {"CPU-hours": round(wall / 3600, 9), "TPU v4 chip-hours": round(4 * wall / 3600, 9)}
    chip, cpu = record["hours"]["TPU v4 chip-hours"], record["hours"]["CPU-hours"]
    words = f"1 step worth {number(chip)} TPU v4 chip-hours, {number(cpu)} CPU-hours"
    assert [s.compute_text for s in summaries] == [f"spent {words}", f"reused {words}"]


def test_two_drivers_sharing_an_ancestor_run_it_once(ray_cluster, prefix, tmp_path):
    log = tmp_path / "calls.log"
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "ray_steps.py"), "shared", ray_cluster.address, prefix, tag, str(log)],
            env=node_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("one", "two")
    ]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err[-3000:]
    calls = log.read_text().split()
    assert len([c for c in calls if "/shared/root-" in c]) == 1, calls
    assert len(calls) == 3, calls


def test_the_coordinator_of_a_multi_host_slice_never_runs_on_a_spot_node(ray_cluster, prefix):
    # Two nodes that both offer what the steps ask for; one is a spot VM. A multi-host slice's step task (its
    # coordinator) asks for nothing of the slice, so only its label selector keeps it off the spot node.
    spot = ray_cluster.add_node({"coord": 8}, num_cpus=2, env={"RAY_NODE_MARKET_TYPE": "spot"})  # Ray labels it
    on_demand = ray_cluster.add_node({"coord": 8}, num_cpus=2)
    try:
        steps = [rs.probe(f"coordinator/{i}", text=str(i), resources={"tpu": "v4-16", "coord": 1}) for i in range(6)]
        paths = make_executor(prefix, RayBackend(ray_cluster.address)).run(steps)
        assert {where(paths[step])["node_id"] for step in steps} == {on_demand.node_id}
    finally:
        ray_cluster.remove_nodes([spot, on_demand])


def test_a_dead_worker_node_is_retried_and_the_build_finishes(ray_cluster, prefix, tmp_path):
    spot = ray_cluster.add_node({"spot": 1})
    attempts = tmp_path / "attempts"
    step = rs.probe("preempted", fn=rs.slow_first_attempt, log_dir=str(attempts), resources={"spot": 1})
    executor = make_executor(prefix, RayBackend(ray_cluster.address, max_retries=2))
    result: dict = {}
    builder = threading.Thread(target=lambda: result.update(paths=executor.run([step])), daemon=True)
    builder.start()
    deadline = time.monotonic() + 60
    while not (attempts.exists() and any(attempts.iterdir())):
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    ray_cluster.kill_node(spot)  # preempted mid-step
    replacement = ray_cluster.add_node({"spot": 1})
    builder.join(120)
    assert not builder.is_alive(), "the build did not finish after the node came back"
    out = result["paths"][step]
    assert st.read_status(out) == "SUCCESS"
    assert where(out)["node_id"] == replacement.node_id
    assert len(list(attempts.iterdir())) == 2
    ray_cluster.kill_node(replacement)


def test_an_exception_in_the_step_is_its_failure_with_the_traceback(ray_cluster, prefix, tmp_path):
    attempts = tmp_path / "attempts"
    bad = rs.probe("bad", fn=rs.raise_value_error, text="42", log_dir=str(attempts))
    good = rs.probe("good", text="fine")
    executor = make_executor(prefix, RayBackend(ray_cluster.address), keep_going=True)
    with pytest.raises(StepFailedError) as info:
        executor.run([bad, good])
    assert list(info.value.failures) == ["bad"]
    original = info.value.__cause__
    assert isinstance(original, ValueError) and "boom 42" in str(original)
    remote = original.__cause__
    assert isinstance(remote, RemoteTraceback)
    assert "raise_value_error" in remote.text and "ray_steps.py" in remote.text and "boom 42" in remote.text
    printed = "".join(traceback.format_exception(info.value))
    assert "raise_value_error" in printed  # the remote frames show when the error is printed
    assert len(list(attempts.iterdir())) == 1  # the step's own error is not retried
    assert st.read_status(executor.output_paths[bad]) == "FAILED"
    assert st.read_status(executor.output_paths[good]) == "SUCCESS"


def test_a_task_lost_beyond_its_retries_fails_its_step_alone(ray_cluster, prefix, tmp_path):
    """A step whose worker dies on every attempt is retried ``max_retries`` times, then FAILED with
    ``StepLostError``; a step beside it commits."""
    attempts = tmp_path / "attempts"
    lost = rs.probe("lost", fn=rs.die, log_dir=str(attempts))
    good = rs.probe("beside", text="fine")
    executor = make_executor(prefix, RayBackend(ray_cluster.address, max_retries=1), keep_going=True)
    with pytest.raises(StepFailedError) as info:
        executor.run([lost, good])
    assert list(info.value.failures) == ["lost"]
    assert isinstance(info.value.failures["lost"].__cause__, StepLostError)
    assert len(list(attempts.iterdir())) == 2  # the first attempt and one retry
    assert st.read_status(executor.output_paths[lost]) == "FAILED"
    assert st.read_status(executor.output_paths[good]) == "SUCCESS"


def test_the_task_runs_and_commits_the_step_under_the_drivers_lease(ray_cluster, prefix):
    step = rs.probe("lease/seen", fn=rs.lease_seen)
    executor = make_executor(prefix, RayBackend(ray_cluster.address))
    out = executor.run([step])[step]
    seen = json.loads(Path(out, ".artifact.json").read_text())  # what the step saw while it ran
    assert seen["lease"] == executor.worker_id and seen["pid"] != os.getpid()  # the driver's lease, held
    assert seen["status"] == "RUNNING" and seen["info"]  # written by the task before the step ran
    assert st.read_status(out) == "SUCCESS"
    record = action_cache.read_record(out, action_cache.version_digest(executor.version_strs[step]))
    assert record is not None and record.name == "lease/seen" and record.worker_id == executor.worker_id
    assert record.manifest is not None
    assert not Path(out, ".executor_status.lock").exists()  # released by the driver once the task ended
    assert executor.outcome.ran == [step]


def test_a_task_whose_lease_was_taken_over_writes_no_success(ray_cluster, prefix):
    stolen = rs.probe("lease/stolen", fn=rs.steal_lease)
    good = rs.probe("lease/good", text="fine")
    executor = make_executor(prefix, RayBackend(ray_cluster.address), keep_going=True)
    with pytest.raises(StepFailedError) as info:
        executor.run([stolen, good])
    assert list(info.value.failures) == ["lease/stolen"]
    error = info.value.failures["lease/stolen"]
    assert isinstance(error, LeaseLostError) and rs.THIEF in str(error)
    assert isinstance(error.__cause__, RemoteTraceback) and "LeaseLostError" in error.__cause__.text
    out = Path(executor.output_paths[stolen])
    assert (out / "out.txt").exists()  # the step ran; its commit did not happen
    assert st.read_status(str(out)) == "RUNNING"  # neither SUCCESS nor FAILED: the step is the new holder's
    assert not (out / ".artifact.json").exists() and not list(out.glob(".marinbuild_action.*"))
    assert json.loads((out / ".executor_status.lock").read_text())["worker_id"] == rs.THIEF  # left alone
    assert st.read_status(executor.output_paths[good]) == "SUCCESS"


def test_marinbuilds_own_error_in_the_task_is_reported_as_it_is(ray_cluster, prefix):
    """A damaged lease file (DamagedFileError, whose constructor takes two arguments) crosses back intact."""
    step = rs.probe("lease/damaged", fn=rs.damage_lease)
    executor = make_executor(prefix, RayBackend(ray_cluster.address))
    with pytest.raises(StepFailedError) as info:
        executor.run([step])
    error = info.value.failures["lease/damaged"]
    assert isinstance(error, DamagedFileError) and error.path.endswith(".executor_status.lock")
    assert "not JSON" in str(error) and isinstance(error.__cause__, RemoteTraceback)
    assert st.read_status(executor.output_paths[step]) == "RUNNING"


def test_a_ray_remote_function_runs_in_a_committing_task_with_its_own_options(ray_cluster, tpu_node, prefix):
    import ray

    declared = ray.remote(resources={"TPU": 1}, runtime_env={"env_vars": {"PROBE": "declared"}})(rs.env_probe)
    step = rs.probe("remote/declared", fn=declared)
    out = make_executor(prefix, RayBackend(ray_cluster.address)).run([step])[step]
    assert json.loads(Path(out, ".artifact.json").read_text()) == {"PROBE": "declared", "node_id": tpu_node.node_id}
    assert st.read_status(out) == "SUCCESS"


def test_steps_on_a_gs_prefix_commit_from_the_task(ray_cluster, gs_prefix, gcs_env):
    """On GCS the task writes RUNNING, info, record, artifact and SUCCESS; the driver CAS-renews its lease."""
    from marinbuild.store import fs, records
    from marinbuild.store.lease import lease_path

    def step(name: str, fn) -> ExecutorStep:
        return rs.probe(name, fn=remote(fn, env_vars=gcs_env), text=name)  # the task reaches the same server

    ok, stolen = step("gs/ok", rs.write_gs), step("gs/stolen", rs.steal_lease)
    executor = make_executor(gs_prefix, RayBackend(ray_cluster.address), keep_going=True, heartbeat_interval=0.5)
    with pytest.raises(StepFailedError) as info:
        executor.run([ok, stolen])
    out = executor.output_paths[ok]
    assert out.startswith("gs://") and fs.read_bytes(out + "/out.txt") == b"gs/ok"
    assert st.read_status(out) == "SUCCESS" and records.read_artifact(out)["text"] == "gs/ok"
    assert action_cache.read_record(out, action_cache.version_digest(executor.version_strs[ok])) is not None
    assert records.read_info(out)["name"] == "gs/ok"
    assert fs.read_bytes(lease_path(out)) is None  # released
    assert isinstance(info.value.failures["gs/stolen"], LeaseLostError)
    lost = executor.output_paths[stolen]
    assert st.read_status(lost) == "RUNNING" and records.read_artifact(lost) is None
    assert json.loads(fs.read_bytes(lease_path(lost)))["worker_id"] == rs.THIEF  # not deleted by the driver


def test_a_step_ready_while_another_runs_is_launched_at_once(ray_cluster, prefix):
    """The driver loop sleeps while the slow task runs; the step that becomes ready meanwhile is launched while
    the slow task still runs."""
    marks = os.path.join(prefix, "marks")
    os.makedirs(marks)
    # The slow step runs until the dependent step has run (or 120 s): only a driver that launches the
    # dependent step while the slow one still runs lets it see the mark.
    slow = rs.probe("ready/slow", fn=rs.where_once_marked, text="120", log_dir=marks)
    first = rs.probe("ready/first", text="1")
    then = ExecutorStep(
        name="ready/then", fn=rs.where_then_mark, config=rs.ProbeConfig(text=output_path_of(first), log_dir=marks)
    )
    paths = make_executor(prefix, RayBackend(ray_cluster.address)).run([slow, then])
    assert json.loads(Path(paths[slow], ".artifact.json").read_text())["saw_mark"] is True
    assert st.read_status(paths[then]) == st.read_status(paths[slow]) == "SUCCESS"


def test_a_running_steps_progress_reaches_the_drivers_events(ray_cluster, prefix):
    """The relay starts once a step has run a while; the step reports until the driver has heard it."""
    marks = os.path.join(prefix, "marks")
    os.makedirs(marks)
    heard = []

    def listener(event):
        if event.kind == "progress":
            heard.append(event)
            Path(marks, "mark").write_text("heard")

    step = rs.probe("progress/reporter", fn=rs.reports_until_heard, log_dir=marks)
    backend = RayBackend(ray_cluster.address)
    paths = Executor(prefix, os.path.join(prefix, "experiments"), listeners=[listener], backend=backend).run([step])
    assert json.loads(Path(paths[step], ".artifact.json").read_text())["heard"] is True
    assert heard[0].step == "progress/reporter" and heard[0].detail.startswith("report ") and heard[0].data["sent"] > 0


def test_a_quick_steps_last_progress_report_reaches_the_drivers_events(ray_cluster, prefix):
    """A step that ends before the relay starts returns its last report with its result."""
    events = []
    step = rs.probe("progress/once", fn=rs.reports_once)
    backend = RayBackend(ray_cluster.address)
    Executor(prefix, os.path.join(prefix, "experiments"), listeners=[events.append], backend=backend).run([step])
    kinds = [(e.kind, e.detail, e.data) for e in events if e.step == "progress/once"]
    assert ("progress", "the only report", {"n": 1}) in kinds
    assert kinds.index(("progress", "the only report", {"n": 1})) < [k for k, _, _ in kinds].index("succeeded")


def test_steps_beyond_the_launch_window_wait_their_turn_without_a_lease(ray_cluster, prefix):
    steps = [rs.probe(f"window/s{i}", fn=rs.leases_held, text=str(i), log_dir=prefix) for i in range(5)]
    backend = RayBackend(ray_cluster.address, launch_window=1)
    executor = make_executor(prefix, backend)
    paths = executor.run(steps)
    assert set(executor.outcome.ran) == set(steps)
    assert all(st.read_status(paths[s]) == "SUCCESS" for s in steps)
    assert [json.loads(Path(paths[s], ".artifact.json").read_text())["leases"] for s in steps] == [1] * 5


def test_a_step_whose_lease_another_runner_holds_waits_off_the_loop(ray_cluster, prefix):
    """The loop goes on launching while a lease thread waits; the other runner's result is then used."""
    from marinbuild.store.lease_factory import lease_for

    held, free = rs.probe("contended/held", text="h"), rs.probe("contended/free", text="f")
    executor = make_executor(prefix, RayBackend(ray_cluster.address))
    executor.compute_versions([held, free])
    other = lease_for(executor.output_paths[held], "another-runner")
    assert other.try_acquire()  # live: it was just written
    result: dict = {}
    builder = threading.Thread(target=lambda: result.update(paths=executor.run([held, free])), daemon=True)
    builder.start()
    deadline = time.monotonic() + 60
    while st.read_status(executor.output_paths[free]) != "SUCCESS":
        assert time.monotonic() < deadline and builder.is_alive(), "the free step did not run"
        time.sleep(0.1)
    assert builder.is_alive() and st.read_status(executor.output_paths[held]) is None  # still waiting
    Path(executor.output_paths[held], "where.json").write_text("{}")
    st.write_status(executor.output_paths[held], "SUCCESS")  # the other runner finishes
    other.release()
    builder.join(60)
    assert not builder.is_alive()
    assert executor.outcome.cached == [held] and executor.outcome.ran == [free]


def test_steps_whose_config_class_is_the_scripts_own(ray_cluster, prefix):
    """A driver script's own config dataclass (``__main__``) reaches the tasks (shipped once per class)."""
    proc = subprocess.run(
        [sys.executable, str(HERE / "ray_steps.py"), "probes", ray_cluster.address, prefix, "4"],
        env=node_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))
    assert report["config_module"] == "__main__" and len(report["outputs"]) == 4
    for out in report["outputs"]:
        assert st.read_status(out) == "SUCCESS" and where(out)["pid"] != os.getpid()


def _json_line(proc: subprocess.Popen) -> dict:
    """The next JSON line the driver printed (Ray may print its own lines too)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            return json.loads(line)
    raise AssertionError("the driver ended without a report: " + (proc.stderr.read() if proc.stderr else ""))


def test_ctrl_c_cancels_the_task_and_releases_the_lease(ray_cluster, prefix):
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "ray_steps.py"), "hang", ray_cluster.address, prefix],
        env=node_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        assert proc.stdout is not None
        out = _json_line(proc)["output_path"]
        deadline = time.monotonic() + 90
        while not Path(out, "pid").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        report = _json_line(proc)
        proc.wait(60)
    finally:
        proc.kill()
    assert report == {"interrupted": True, "task_alive": False, "lease_left": False}
    assert st.read_status(out) == "RUNNING"  # not built, not failed: the next build takes it over at once


BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "steps:write", config = {"text": "A"})
python_step(name = "b", fn = "steps:write", config = {"text": "B"}, deps = [":a"], resources = {"TPU": 1})
"""

STEPS_PY = """
import os


def write(config):
    import ray

    parts = []
    for dep in config["deps"]:
        with open(os.path.join(dep, "out.txt")) as f:
            parts.append(f.read())
    parts.append(config["text"])
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write("+".join(parts))
    with open(os.path.join(config["output_path"], "node"), "w") as f:
        f.write(ray.get_runtime_context().get_node_id())
    return {"greeting": os.environ.get("GREETING")}
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "steps.py").write_text(STEPS_PY)
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    monkeypatch.chdir(root)
    return root


def test_build_targets_run_on_ray(ray_cluster, tpu_node, ws, capsys):
    from marinbuild.cli import main

    code = main(["//pipe:b", "--backend", "ray", "--ray_address", ray_cluster.address])
    out, err = capsys.readouterr()
    assert code == 0, err
    b = next((ws / "out" / "pipe").glob("b-*"))
    assert (b / "out.txt").read_text() == "A+B"
    assert (b / "node").read_text() == tpu_node.node_id  # resources = {"TPU": 1} in the BUILD file


def test_submit_runs_a_build_as_a_job_and_returns_its_status(ray_cluster, ws, tmp_path, capsys):
    from marinbuild.cli import main

    outputs = tmp_path / "job-out"
    code = main(
        [
            "submit",
            "--address",
            ray_cluster.dashboard_url,
            "-e",
            "GREETING",
            "hello",
            "--",
            "python",
            "-m",
            "marinbuild",
            "//pipe:a",
            "--backend",
            "ray",
            "--prefix",
            str(outputs),
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, out + err
    job_id = out.splitlines()[0]
    assert job_id.startswith("raysubmit_")
    assert "Build OK" in out  # the job's own output, followed here
    a = next((outputs / "pipe").glob("a-*"))
    assert json.loads((a / ".artifact.json").read_text()) == {"greeting": "hello"}
    assert "SUCCEEDED" in err

    code = main(["submit", "--address", ray_cluster.dashboard_url, "--", "python", "-c", "import sys; sys.exit(3)"])
    out, err = capsys.readouterr()
    assert code == 3 and "FAILED" in err


def test_submit_no_wait_prints_the_job_id(ray_cluster, ws, capsys):
    from marinbuild.cli import main
    from marinbuild.cluster import submit as jobs

    code = main(["submit", "--address", ray_cluster.dashboard_url, "--no_wait", "--", "python", "-c", "print(1)"])
    out, _ = capsys.readouterr()
    assert code == 0
    job_id = out.strip()
    assert job_id.startswith("raysubmit_")
    from ray.job_submission import JobSubmissionClient

    submission = jobs.Submission(JobSubmissionClient(ray_cluster.dashboard_url), job_id, ray_cluster.dashboard_url)
    assert jobs.final_status(submission) == ("SUCCEEDED", 0)
