"""Checkpoint hand-offs through the executor API: ``producer.cd("checkpoints/step-N").nonblocking()``.

The consumer waits for the checkpoint (not for the producer to finish), starts once the checkpoint's
``metadata.json`` is there, and fails at once with one line when the producer ends without it. The producer
writes its checkpoints the way levanter does on a local disk (the folder, then ``metadata.json`` last, in place), with
real pauses, one of them inside ``metadata.json``'s writing: a file that exists is not yet a checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import pytest

from marinbuild.executor import Executor, ExecutorStep, StepFailedError, this_output_path, versioned
from marinbuild.run import events as ev
from marinbuild.store import status as st


@dataclass(frozen=True)
class TrainCfg:
    steps: Any
    output_path: Any
    initialize_from: Any = None
    after: Any = None


def _train(config: TrainCfg) -> None:
    """Write ``checkpoints/step-N/metadata.json`` for N = 10, 20, ... up to ``steps``, a pause before each and one
    half-way through writing it."""
    for n in range(10, config.steps + 1, 10):
        time.sleep(0.3)
        folder = os.path.join(config.output_path, "checkpoints", f"step-{n}")
        os.makedirs(folder)
        with open(os.path.join(folder, "metadata.json"), "w") as f:
            f.write('{"step": ')
            f.flush()
            time.sleep(0.3)
            f.write(f"{n}}}")


def _consume(config: TrainCfg) -> None:
    """Record whether the checkpoint it starts from was complete when it started."""
    os.makedirs(config.output_path, exist_ok=True)
    try:
        with open(os.path.join(config.initialize_from, "metadata.json")) as f:
            there = json.load(f)["step"] > 0
    except (OSError, ValueError):
        there = False
    with open(os.path.join(config.output_path, "started.json"), "w") as f:
        json.dump({"checkpoint_there": there, "time": time.time()}, f)


def _slow(config: TrainCfg) -> None:
    time.sleep(0.5)


def _phases(steps: int, step: int, tag: str) -> tuple[ExecutorStep, ExecutorStep]:
    """The producer runs after a slow step, so the consumer is ready first."""
    slow = ExecutorStep(f"{tag}/slow", _slow, TrainCfg(1, this_output_path()))
    producer = ExecutorStep(f"{tag}/phase1", _train, TrainCfg(versioned(steps), this_output_path(), after=slow))
    consumer = ExecutorStep(
        f"{tag}/phase2",
        _consume,
        TrainCfg(versioned(5), this_output_path(), producer.cd(f"checkpoints/step-{step}").nonblocking()),
    )
    return producer, consumer


def _executor(prefix: str, events: list[ev.Event], **kwargs: Any) -> Executor:
    return Executor(prefix, os.path.join(prefix, "experiments"), listeners=[events.append], **kwargs)


@pytest.mark.parametrize("max_concurrent", [None, 1])  # 1: a held consumer takes no slot, or the producer never ran
def test_consumer_waits_for_the_checkpoint_not_for_the_producer(tmp_path, max_concurrent):
    prefix = str(tmp_path / "out")
    producer, consumer = _phases(steps=40, step=20, tag=f"wait{max_concurrent}")
    events: list[ev.Event] = []
    ex = _executor(prefix, events)
    ex.run([consumer], max_concurrent=max_concurrent)  # the producer is needed: its checkpoint is not there yet

    out, made = ex.output_paths[consumer], ex.output_paths[producer]
    assert st.read_status(out) == st.STATUS_SUCCESS and st.read_status(made) == st.STATUS_SUCCESS
    started = json.loads(open(os.path.join(out, "started.json")).read())
    assert started["checkpoint_there"]
    waiting = [e for e in events if e.kind == ev.WAITING and e.step == consumer.name]
    assert [e.detail for e in waiting] == [f"checkpoint step-20 of {producer.name}"]
    if max_concurrent is None:  # it started while the producer trained on, not after it finished
        finished = os.path.getmtime(os.path.join(made, "checkpoints", "step-40", "metadata.json"))
        assert started["time"] < finished

    again: list[ev.Event] = []
    _executor(prefix, again).run([consumer])  # the producer trained on and finished: the consumer is not stale
    assert not [e for e in again if e.kind in (ev.STARTED, ev.WAITING)]


def test_consumer_fails_at_once_when_the_producer_ends_without_the_checkpoint(tmp_path):
    prefix = str(tmp_path / "out")
    producer, consumer = _phases(steps=30, step=25, tag="never")
    events: list[ev.Event] = []
    with pytest.raises(StepFailedError) as raised:
        _executor(prefix, events).run([consumer])
    error = raised.value.failures[consumer.name]
    line = f"{consumer.name}: starts from checkpoint step-25 of {producer.name}, but {producer.name} finished "
    assert str(error) == line + "without it; its last checkpoint: step-30"
    assert [e.kind for e in events if e.step == consumer.name][-2:] == [ev.WAITING, ev.FAILED]
    assert not [p for p in (tmp_path / "out" / "never").iterdir() if p.name.startswith("phase2-")]

    # The producer is built now: asking again fails before anything waits.
    started = time.monotonic()
    with pytest.raises(StepFailedError) as raised:
        _executor(prefix, events := []).run([consumer])
    assert str(raised.value.failures[consumer.name]) == line + "without it; its last checkpoint: step-30"
    assert time.monotonic() - started < 5 and not [e for e in events if e.kind == ev.WAITING]


def test_a_checkpoint_already_there_starts_the_consumer_without_its_producer(tmp_path):
    prefix = str(tmp_path / "out")
    producer, consumer = _phases(steps=20, step=10, tag="there")
    ex = _executor(prefix, [])
    ex.run([producer])
    os.remove(os.path.join(ex.output_paths[producer], ".executor_status"))  # as if it were still training elsewhere
    events: list[ev.Event] = []
    _executor(prefix, events).run([consumer])
    assert {e.step for e in events if e.kind == ev.STARTED} == {consumer.name}
    assert not [e for e in events if e.kind == ev.WAITING]


SCRIPT = """
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from marinbuild.executor import ExecutorStep, this_output_path, versioned

GO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")


@dataclass(frozen=True)
class Cfg:
    output_path: Any
    v: Any
    init: Any = None


def checkpoint(output_path, n):
    folder = os.path.join(output_path, "checkpoints", f"step-{n}")
    os.makedirs(folder)
    with open(os.path.join(folder, "metadata.json"), "w") as f:
        json.dump({"step": n}, f)


def train(config):
    checkpoint(config.output_path, 10)
    while not os.path.exists(GO):  # the test says when step 20 may come
        time.sleep(0.05)
    checkpoint(config.output_path, 20)


def consume(config):
    os.makedirs(config.output_path, exist_ok=True)


phase1 = ExecutorStep("pipe/phase1", train, Cfg(this_output_path(), versioned(1)))
handoff = phase1.cd("checkpoints/step-20").nonblocking()
phase2 = ExecutorStep("pipe/phase2", consume, Cfg(this_output_path(), versioned(2), handoff))
"""


def test_a_waiting_step_is_shown_by_progress_cache_status_why_and_serve(tmp_path):
    from serve_ws import Server, env_for
    from workspaces import write_workspace

    ws = write_workspace(
        tmp_path / "ws",
        {
            "pipe/phases.py": SCRIPT,
            "pipe/BUILD.marin": 'load("@marinbuild//rules:python.py", "executor_script")\n'
            'executor_script(name = "phases", script = "phases.py")\n',
        },
    )
    env = env_for(ws)
    build = subprocess.Popen(
        [sys.executable, "-m", "marinbuild", "//pipe:phases", "--build_event_json_file", str(tmp_path / "ev.jsonl")],
        cwd=ws, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    server = None
    try:
        line = "checkpoint step-20 of pipe/phase1 (pipe/phase1 running; its last checkpoint: step-10)"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and "pipe/phase2" not in _waiting_events(tmp_path / "ev.jsonl"):
            time.sleep(0.1)
        assert _waiting_events(tmp_path / "ev.jsonl") == {"pipe/phase2": "checkpoint step-20 of pipe/phase1"}

        status = subprocess.run([sys.executable, "-m", "marinbuild", "cache", "status", "//pipe:phases"], **_run(ws))
        assert f"//pipe:phases: waiting for {line}" in status.stdout, status.stdout + status.stderr
        assert status.stdout.splitlines()[1].split()[:2] == ["//pipe:phases", "waiting"], status.stdout
        why = subprocess.run([sys.executable, "-m", "marinbuild", "why", "//pipe:phases"], **_run(ws))
        assert f"  waits for {line}\n" in why.stdout, why.stdout + why.stderr
        server = Server(ws)
        nodes = {n["name"]: n for n in server.json("/api/graph")["nodes"]}
        assert (nodes["pipe/phase2"]["state"], nodes["pipe/phase2"]["detail"]) == ("waiting", f"waiting for {line}")

        (ws / "pipe" / "go").write_text("")
        _, stderr = build.communicate(timeout=120)
        assert build.returncode == 0, stderr
        assert "waiting for pipe/phase2: checkpoint step-20 of pipe/phase1" in stderr
    finally:
        if server is not None:
            server.stop()
        if build.poll() is None:
            build.kill()
            build.wait()


def _waiting_events(path) -> dict[str, str]:
    """The steps a build's event file says are waiting, and for what (``lease held by ...`` waits aside)."""
    events = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return {e["step"]: e["detail"] for e in events if e["kind"] == "waiting"}


def _run(ws) -> dict[str, Any]:
    from serve_ws import env_for

    return {"cwd": ws, "env": env_for(ws), "capture_output": True, "text": True, "timeout": 120}
