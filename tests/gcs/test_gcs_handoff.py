"""Checkpoint hand-offs on ``gs://``: no file to watch, so the held step reads the store again after a backoff."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import pytest

from marinbuild.executor import Executor, ExecutorStep, StepFailedError, this_output_path, versioned
from marinbuild.run import events as ev
from marinbuild.store import fs
from marinbuild.store import status as st


@dataclass(frozen=True)
class Cfg:
    output_path: Any
    steps: Any
    init: Any = None


def _train(config: Cfg) -> None:
    for n in range(10, config.steps + 1, 10):
        time.sleep(0.5)
        fs.write_atomic(fs.join(config.output_path, f"checkpoints/step-{n}/metadata.json"), b'{"step": %d}' % n)


def _consume(config: Cfg) -> None:
    there = fs.exists(fs.join(config.init, "metadata.json"))
    fs.write_atomic(fs.join(config.output_path, "started.txt"), str(there).encode())


def test_a_consumer_on_gcs_waits_for_the_checkpoint_and_fails_without_it(gs_prefix):
    producer = ExecutorStep("gcs/phase1", _train, Cfg(this_output_path(), versioned(30)))
    waits = ExecutorStep(
        "gcs/phase2", _consume, Cfg(this_output_path(), 1, producer.cd("checkpoints/step-20").nonblocking())
    )
    never = ExecutorStep(
        "gcs/phase3", _consume, Cfg(this_output_path(), 1, producer.cd("checkpoints/step-25").nonblocking())
    )
    events: list[ev.Event] = []
    ex = Executor(gs_prefix, gs_prefix + "/experiments", listeners=[events.append])
    with pytest.raises(StepFailedError) as raised:
        ex.run([waits, never])

    assert fs.read_bytes(fs.join(ex.output_paths[waits], "started.txt")) == b"True"
    assert st.read_status(ex.output_paths[producer]) == st.STATUS_SUCCESS
    assert [e.detail for e in events if e.kind == ev.WAITING and e.step == "gcs/phase2"] == [
        "checkpoint step-20 of gcs/phase1"
    ]
    assert str(raised.value.failures["gcs/phase3"]) == (
        "gcs/phase3: starts from checkpoint step-25 of gcs/phase1, but gcs/phase1 finished without it; "
        "its last checkpoint: step-30"
    )
