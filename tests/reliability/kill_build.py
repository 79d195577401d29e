"""A small build for the kill tests, run as its own process:
``python kill_build.py PREFIX [--fail] [--dry_run] [--sleep SECONDS]`` (each step sleeps that long).

Five steps: a; b and c on a; d on b and c; and with ``--fail`` a step ``f`` that always raises. Prints one JSON line:
``{"ok", "error", "waits": [seconds waited on each step another runner held], "ran": [steps run here],
"succeeded": [...], "failed": [...]}`` (steps as the build reported them); on a ``gs://`` PREFIX the steps write
through fsspec. Exits 0
if the build succeeded, 1 if it raised. ``MARINBUILD_KILL_AT_POINT`` / ``MARINBUILD_FAULT_POINT_LOG`` (see
``marinbuild.store.faults``) make it die at a metadata write or list the writes it passes.
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE), os.path.join(os.path.dirname(HERE), "gcs")]

import pipelines as pl  # noqa: E402
from soak_steps import exclusive_write  # noqa: E402

from marinbuild.executor import Executor  # noqa: E402
from marinbuild.run import events as ev  # noqa: E402


def graph(fail: bool, sleep: float, remote: bool) -> list:
    def step(name: str, text: str, inputs: list | None = None) -> object:
        if remote:  # a gs:// prefix: steps that write through fsspec
            import gcs_pipelines as gp

            return gp.step(name, text, inputs, sleep=sleep)
        return pl.step(name, text, inputs, fn=exclusive_write, sleep=sleep)

    a = step("a", "A")
    b = step("b", "B", [a])
    c = step("c", "C", [a])
    d = step("d", "D", [b, c])
    return [d, pl.step("f", "F", fn=pl.fail_always)] if fail else [d]


class Waits:
    """Seconds from each WAITING event to that step's end (built, cached or failed); the steps run here, and those
    reported succeeded and failed."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}
        self.waits: list[float] = []
        self.ran: list[str] = []
        self.succeeded: list[str] = []
        self.failed: list[str] = []

    def __call__(self, event: ev.Event) -> None:
        if event.kind == ev.WAITING and event.step:
            self.started[event.step] = time.monotonic()
        elif event.kind in (ev.SUCCEEDED, ev.CACHED, ev.FAILED, ev.STARTED) and event.step in self.started:
            self.waits.append(round(time.monotonic() - self.started.pop(event.step), 3))
        if event.kind == ev.STARTED and event.step:
            self.ran.append(event.step)
        elif event.kind == ev.SUCCEEDED and event.step:
            self.succeeded.append(event.step)
        elif event.kind == ev.FAILED and event.step:
            self.failed.append(event.step)


def main() -> int:
    prefix = sys.argv[1]
    waits = Waits()
    executor = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[waits])
    error = None
    try:
        sleep = float(sys.argv[sys.argv.index("--sleep") + 1]) if "--sleep" in sys.argv else 0.0
        executor.run(graph("--fail" in sys.argv, sleep, prefix.startswith("gs://")), dry_run="--dry_run" in sys.argv)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    print(
        json.dumps(
            {
                "ok": error is None,
                "error": error,
                "waits": waits.waits,
                "ran": waits.ran,
                "succeeded": waits.succeeded,
                "failed": waits.failed,
            }
        ),
        flush=True,
    )
    return 0 if error is None else 1


if __name__ == "__main__":
    sys.exit(main())
