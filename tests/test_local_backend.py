"""The local backend: every ready step runs at once on a thread of its own, or at most ``max_concurrent``."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from marinbuild.executor import Executor, ExecutorStep, versioned
from marinbuild.run.local import LocalBackend


def _executor(prefix: str, backend: Any = None) -> Executor:
    return Executor(
        prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[], backend=backend
    )


def test_unbounded_runs_every_ready_step_at_once(tmp_path):
    """Twelve steps that can only finish together."""
    barrier = threading.Barrier(12, timeout=30)

    def meet(config: Any) -> None:
        barrier.wait()

    steps = [ExecutorStep(name=f"meet/{i}", fn=meet, config={"i": versioned(i)}) for i in range(12)]
    ex = _executor(str(tmp_path), LocalBackend())
    ex.run(steps)
    assert len(ex.outcome.ran) == 12


class _Job:
    """What the backend needs of a step job: a name and ``run_here``."""

    def __init__(self, name: str, body: Any):
        self.name = name
        self.body = body

    def run_here(self) -> str:
        return self.body()


def test_max_concurrent_caps_the_steps_running_at_once():
    active = 0
    peak = 0
    lock = threading.Lock()
    release = threading.Event()
    finished = threading.Semaphore(0)
    reported: list[tuple[str, Any, Any]] = []

    def body() -> str:
        nonlocal active, peak
        with lock:
            active += 1
            peak = max(peak, active)
        release.wait(30)
        with lock:
            active -= 1
        return "ran"

    def done(job: Any, outcome: Any, error: Any) -> None:
        reported.append((job.name, outcome, error))
        finished.release()

    backend = LocalBackend(2)
    for i in range(6):
        backend.submit(_Job(f"s{i}", body), done)  # type: ignore[arg-type]
    deadline = time.monotonic() + 30
    while peak < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # room for a third step to start, were the cap not kept
    assert peak == 2
    release.set()
    for _ in range(6):
        assert finished.acquire(timeout=30)
    backend.shutdown()
    assert peak == 2
    assert sorted(reported) == [(f"s{i}", "ran", None) for i in range(6)]


def test_a_step_error_is_reported_through_done():
    reported: list[Any] = []
    finished = threading.Event()

    def boom() -> str:
        raise RuntimeError("boom")

    def done(job: Any, outcome: Any, error: Any) -> None:
        reported.append((outcome, error))
        finished.set()

    LocalBackend().submit(_Job("boom", boom), done)  # type: ignore[arg-type]
    assert finished.wait(30)
    outcome, error = reported[0]
    assert outcome is None and isinstance(error, RuntimeError)
