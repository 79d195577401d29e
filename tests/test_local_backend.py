"""The local backend: every ready step runs at once, yet short steps share a few fast slots."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from marinbuild.executor import Executor, ExecutorStep, versioned
from marinbuild.run.local import LocalBackend, default_fast_slots


def _executor(prefix: str, backend: Any = None) -> Executor:
    return Executor(
        prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[], backend=backend
    )


def test_unbounded_runs_every_ready_step_at_once(tmp_path):
    """Twelve steps that can only finish together: long steps are promoted off the fast slots, so all run."""
    barrier = threading.Barrier(12, timeout=30)

    def meet(config: Any) -> None:
        barrier.wait()

    steps = [ExecutorStep(name=f"meet/{i}", fn=meet, config={"i": versioned(i)}) for i in range(12)]
    ex = _executor(str(tmp_path), LocalBackend(fast_slots=1, promote_after=0.02))
    ex.run(steps)
    assert len(ex.outcome.ran) == 12


def test_short_steps_run_one_fast_slot_at_a_time(tmp_path):
    active = 0
    peak = 0
    lock = threading.Lock()
    threads: set[threading.Thread] = set()

    def short(config: Any) -> None:
        nonlocal active, peak
        with lock:
            threads.add(threading.current_thread())
            active += 1
            peak = max(peak, active)
        with lock:
            active -= 1

    steps = [ExecutorStep(name=f"short/{i}", fn=short, config={"i": versioned(i)}) for i in range(30)]
    backend = LocalBackend(fast_slots=1, promote_after=600)  # nothing is ever promoted
    ex = _executor(str(tmp_path), backend)
    ex.run(steps)
    backend.shutdown()
    assert len(ex.outcome.ran) == 30
    assert peak == 1
    assert len(threads) == 1  # one thread ran them all, back to back


def test_fast_slots_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("MARINBUILD_LOCAL_SLOTS", "3")
    assert default_fast_slots() == 3
    monkeypatch.setenv("MARINBUILD_LOCAL_SLOTS", "zero")
    with pytest.raises(ValueError, match="MARINBUILD_LOCAL_SLOTS"):
        default_fast_slots()
    monkeypatch.delenv("MARINBUILD_LOCAL_SLOTS")
    assert default_fast_slots() == max(1, (os.cpu_count() or 2) // 2)
