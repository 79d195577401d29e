"""A failed step's traceback on the Ray backend (the real test cluster, see conftest.py).

The step fails in its Ray task; the driver writes the remote traceback to ``.marinbuild_traceback.txt`` before
FAILED, with the worker's log named in its last line; the event log, the summary and the error carry it; a
later success (committed by the task) removes it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import traceback_steps as ts
from raycluster import node_env

from marinbuild.executor import Executor, StepFailedError
from marinbuild.run.ray_backend import RayBackend
from marinbuild.store import status as st
from marinbuild.ui.bep import BuildEventJsonWriter
from marinbuild.ui.summary import BuildSummary

pytestmark = pytest.mark.timeout(240)

TRACEBACK_FILE = ".marinbuild_traceback.txt"
WORKER_LOG = re.compile(
    r"Ray worker log: (/\S+/logs/worker-([0-9a-f]+)-[0-9a-f]+-(\d+)\.out) \(and \.err\) on node "
    r"[\d.]+ \(([0-9a-f]+)\); `ray logs worker --pid \3 --node-id \4` \(add --err for stderr\)"
)


def run(prefix: str, address: str, step, listeners: list) -> Executor:
    executor = Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        listeners=listeners,
        backend=RayBackend(address),
    )
    executor.run([step])
    return executor


def test_a_step_failed_on_ray_keeps_its_traceback_and_names_its_worker_log(ray_cluster, prefix, tmp_path):
    flag = tmp_path / "fixed"
    summary, events = BuildSummary(), BuildEventJsonWriter(tmp_path / "events.jsonl")
    broken = ts.flaky("tb/on_ray", str(flag))
    with pytest.raises(StepFailedError) as info:
        run(prefix, ray_cluster.address, broken, [summary, events])
    events.close()
    (out,) = Path(prefix).glob("tb/on_ray-*")
    assert st.read_status(str(out)) == "FAILED"
    text = (out / TRACEBACK_FILE).read_text()
    assert text.startswith("ray::")  # Ray's remote traceback: frames from the worker
    assert "in write_value" in text and 'value = table["missing_key"]' in text and "KeyError: 'missing_key'" in text
    log = WORKER_LOG.search(text)
    assert log is not None, text
    assert Path(log.group(1)).is_file()  # the worker's log on its node (this machine)
    assert text.rstrip().endswith(log.group(0))  # its last line

    assert f"traceback: {out / TRACEBACK_FILE}" in str(info.value)
    rendered = summary.render([("//tb:on_ray", str(out))])
    assert "in write_value" in rendered and 'value = table["missing_key"]' in rendered
    assert f"full traceback: {out / TRACEBACK_FILE}" in rendered
    assert f"Ray worker log: {log.group(1)}" in rendered
    (failed,) = [
        e for e in map(json.loads, (tmp_path / "events.jsonl").read_text().splitlines()) if e["kind"] == "failed"
    ]
    assert failed["traceback"] == text.rstrip("\n") and failed["traceback_file"] == str(out / TRACEBACK_FILE)

    flag.write_text("")
    repaired = ts.flaky("tb/on_ray", str(flag))
    run(prefix, ray_cluster.address, repaired, [])
    assert st.read_status(str(out)) == "SUCCESS" and (out / "value.txt").read_text() == "found"
    assert not (out / TRACEBACK_FILE).exists()  # removed by the task's commit, before SUCCESS


STEPS_PY = """
def lookup(config):
    print("lookup starts on its worker", flush=True)
    return helper_of_lookup({"present": 1})


def helper_of_lookup(table):
    return table["missing_key"]
"""


def test_the_cli_on_ray_shows_the_last_frames_the_traceback_file_and_the_worker_log(ray_cluster, tmp_path):
    ws = tmp_path / "ws"
    (ws / "pipe").mkdir(parents=True)
    (ws / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (ws / "steps.py").write_text(STEPS_PY)
    (ws / "pipe" / "BUILD.marin").write_text(
        'load("@marinbuild//rules:python.py", "python_step")\npython_step(name = "lookup", fn = "steps:lookup")\n'
    )
    env = node_env()
    env.pop("MARIN_PREFIX", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "marinbuild",
            "--ray_address",
            ray_cluster.address,
            "--build_event_json_file",
            str(tmp_path / "events.jsonl"),
            "//pipe:lookup",
        ],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (out,) = (ws / "out" / "pipe").glob("lookup-*")
    text = (out / TRACEBACK_FILE).read_text()
    assert "in helper_of_lookup" in text and "KeyError: 'missing_key'" in text
    log = WORKER_LOG.search(text)
    assert log is not None, text
    assert 'return table["missing_key"]' in done.stdout and "in helper_of_lookup" in done.stdout
    assert f"full traceback: {out / TRACEBACK_FILE}" in done.stdout
    assert f"Ray worker log: {log.group(1)}" in done.stdout
    (failed,) = [
        e for e in map(json.loads, (tmp_path / "events.jsonl").read_text().splitlines()) if e["kind"] == "failed"
    ]
    assert failed["traceback"] == text.rstrip("\n")

    command = re.search(r"`ray logs ([^`]+)`", log.group(0)).group(1).split()  # the command it names works
    ray_cli = str(Path(sys.executable).parent / "ray")
    logs = subprocess.run(
        [ray_cli, "logs", *command, "--address", ray_cluster.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert logs.returncode == 0 and "lookup starts on its worker" in logs.stdout, logs.stdout + logs.stderr
