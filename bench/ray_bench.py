"""Ray backend benchmark: 1,000 trivial steps on Ray against 1,000 plain Ray tasks doing the same work.

The work of one step (and one task): write 16 bytes to ``<dir>/out.txt``. The graph is a
fan-out: one root, then N-1 steps that each depend on it (as ``engine_bench.py``'s
``fanout``); the plain-Ray version runs the root task, then the N-1 others at once.

Both run in one process against one local Ray instance (the Ray backend's default: started
here on 127.0.0.1), after a warm-up that starts the worker processes, in alternating rounds;
the medians are reported. Each row starts after ``os.sync()``: the file system's writeback of the
rows before it would otherwise slow its file creation, in its own processes' kernel time (on this
project's VM, by up to half of a Ray backend row's CPU time):

- ``plain ray``: ``ray.get`` of the tasks, nothing else;
- ``plain ray, 64 at a time``: the same tasks as a scheduler must run them, at most 64 launched, each
  one's end handled as it comes (a callback on its future, as the Ray backend's), then the next
  launched: Ray's own cost of reacting to each task (information; the bar is against ``plain ray``);
- ``marinbuild``: ``Executor(...).run(steps)`` on a fresh prefix with the Ray backend as a build
  gets it: versions, plan, leases, ``.executor_info``/status/artifact files, events, the run info
  file; one Ray task per step, so Ray's cost per task is paid N times, as plain Ray pays it, plus
  marinbuild's;
- ``marinbuild (execute)``: the same run from the first step submitted to the last one
  committed (the Ray backend's own share, without versions and planning);
- ``marinbuild, local backend``: the same steps in threads of this process, no Ray: the
  engine's own cost per step (versions, plan, leases, status/info/manifest/artifact files),
  which the Ray backend pays too, on top of Ray's.

Each row also shows this process's CPU time per step (all its threads, Ray's included),
which a loaded machine disturbs less than wall time, and the CPU time of the local Ray
instance's processes (raylet, GCS server, workers: the children of this process alive at the
end of the round, or started during it), where the Ray backend's tasks write a step's files.

Everything is written under ``--dir`` (default: the system's temporary folder), each row into a folder of
its own, and deleted only after the last round: creating files right after a large delete costs several
times more kernel time (``bench/fs_bench.py``), which would fall on the rows that create the most (a run
started right after another pays for that one's delete: leave the disk a few minutes). On this
project's VM a file created on its ext4 ``/tmp`` costs 30-200 microseconds of kernel time, on
``/dev/shm`` (tmpfs) a few microseconds: a step makes ten (its folder, lease, ``RUNNING``, info, compute
record, action record, artifact, ``SUCCESS``, code record, output), a plain task two (folder, output).

The bar (``BAR``): marinbuild's CPU per step (this process and Ray's processes) within 2.5x of
plain Ray's (seconds without psutil). Per-step overhead is (marinbuild - plain ray) / N in seconds:
marinbuild's own cost per step on top of Ray's.

    .venv/bin/python bench/ray_bench.py                 # N=1000, 3 rounds
    .venv/bin/python bench/ray_bench.py --steps 200 --rounds 1 --json /tmp/ray_bench.json
    .venv/bin/python bench/ray_bench.py --dir /dev/shm  # the same without the disk's cost of a file
    .venv/bin/python bench/ray_bench.py --rounds 5 --doc docs/performance.md   # its table there
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
sys.path.insert(0, os.path.join(REPO_ROOT, "bench"))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)

from marinbuild.executor import Executor, ExecutorStep, output_path_of, this_output_path, versioned  # noqa: E402
from marinbuild.run import events as ev  # noqa: E402
from marinbuild.run.ray_backend import RayBackend  # noqa: E402

BAR = 2.5
DEFAULTS = {"steps": 1000, "rounds": 3, "dir": None}
"""The flags' defaults: ``--doc`` names only the flags given otherwise."""
PAYLOAD = b"0123456789abcdef"


def write_out(path: str) -> dict:
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "out.txt"), "wb") as f:
        f.write(PAYLOAD)
    return {"bytes": len(PAYLOAD)}


@dataclass(frozen=True)
class StepConfig:
    i: Any
    inputs: Any = field(default_factory=list)
    output_path: Any = field(default_factory=this_output_path)


def trivial_step(config: StepConfig) -> dict:
    return write_out(config.output_path)


def fanout(n: int, tag: str) -> list[ExecutorStep]:
    root = ExecutorStep(name=f"{tag}/root", fn=trivial_step, config=StepConfig(i=versioned(0)))
    return [root] + [
        ExecutorStep(
            name=f"{tag}/s{i}", fn=trivial_step, config=StepConfig(i=versioned(i), inputs=[output_path_of(root)])
        )
        for i in range(1, n)
    ]


def plain_ray(n: int, base: str) -> float:
    import ray

    task = ray.remote(write_out)
    start = time.perf_counter()
    ray.get(task.remote(os.path.join(base, "root")))
    ray.get([task.remote(os.path.join(base, f"s{i}")) for i in range(1, n)])
    return time.perf_counter() - start


def plain_ray_windowed(n: int, base: str, window: int = 64) -> float:
    """``plain_ray`` as a scheduler must run it: at most ``window`` tasks launched, each one's end handled as it
    comes (a callback on its future, as the Ray backend's), the next launched then."""
    import threading

    import ray

    task, ended, cv = ray.remote(write_out), [], threading.Condition()

    def on_end(future: Any) -> None:
        with cv:
            ended.append(future)
            cv.notify()

    start = time.perf_counter()
    ray.get(task.remote(os.path.join(base, "root")))
    launched = active = 1
    while active > 1 or launched < n:
        while launched < n and active <= window:
            task.remote(os.path.join(base, f"s{launched}")).future().add_done_callback(on_end)
            launched, active = launched + 1, active + 1
        with cv:
            cv.wait_for(lambda: ended)
            done, ended[:] = list(ended), []
        for future in done:
            future.result()
        active -= len(done)
    return time.perf_counter() - start


class Span:
    """Listener: when the first step was handed to the backend and the last one finished."""

    def __init__(self) -> None:
        self.started: float | None = None
        self.finished: float | None = None

    def __call__(self, event: ev.Event) -> None:
        if event.kind == ev.BUILD_STARTED:
            self.started = time.perf_counter()
        elif event.kind == ev.BUILD_FINISHED:
            self.finished = time.perf_counter()


def marinbuild_run(n: int, base: str, backend: Any, tag: str) -> tuple[float, float]:
    """(whole run, execute phase) seconds of a fresh fan-out on ``backend`` (None: the local backend).

    ``backend`` is shut down at the end.
    """
    steps = fanout(n, tag)
    span = Span()
    executor = Executor(
        prefix=base, executor_info_base_path=os.path.join(base, "experiments"), listeners=[span], backend=backend
    )
    start = time.perf_counter()
    try:
        executor.run(steps)
    finally:
        if backend is not None:
            backend.shutdown()
    total = time.perf_counter() - start
    assert len(executor.outcome.ran) == n, executor.outcome
    assert span.started is not None and span.finished is not None
    return total, span.finished - span.started


def ray_processes_cpu() -> dict[int, float]:
    """CPU seconds of each child process of this one (the local Ray instance); empty without psutil."""
    try:
        import psutil
    except ImportError:
        return {}
    seconds = {}
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        seconds[child.pid] = times.user + times.system
    return seconds


def ray_cpu_since(before: dict[int, float]) -> float:
    """CPU seconds Ray's processes used since ``before`` (those alive at both ends, and those started since)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in ray_processes_cpu().items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=DEFAULTS["steps"])
    parser.add_argument("--rounds", type=int, default=DEFAULTS["rounds"])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--dir", help="where the steps write (default: the system's temporary folder)")
    parser.add_argument("--doc", help="write the table into this file (docs/performance.md), between markers")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    backend = RayBackend(log_to_driver=False)
    t0 = time.perf_counter()
    backend.connect()  # the local instance, as `--backend ray` starts it
    import ray

    startup = time.perf_counter() - t0
    cpus = int(ray.cluster_resources().get("CPU", 0))
    tmp = tempfile.mkdtemp(prefix="marinbuild-ray-bench-", dir=args.dir)
    runs: dict[str, list[float]] = {"plain": [], "windowed": [], "total": [], "execute": [], "local": []}
    cpu: dict[str, list[float]] = {"plain": [], "windowed": [], "total": [], "local": []}
    ray_cpu: dict[str, list[float]] = {"plain": [], "windowed": [], "total": []}
    try:
        plain_ray(max(200, 4 * cpus), os.path.join(tmp, "warmup"))  # start the worker processes
        marinbuild_run(50, os.path.join(tmp, "warmup-mb"), RayBackend(), "warm")
        for r in range(args.rounds):
            os.sync()
            c, rc = time.process_time(), ray_processes_cpu()
            runs["plain"].append(plain_ray(args.steps, os.path.join(tmp, f"plain-{r}")))
            cpu["plain"].append(time.process_time() - c)
            ray_cpu["plain"].append(ray_cpu_since(rc))
            os.sync()
            c, rc = time.process_time(), ray_processes_cpu()
            runs["windowed"].append(plain_ray_windowed(args.steps, os.path.join(tmp, f"windowed-{r}")))
            cpu["windowed"].append(time.process_time() - c)
            ray_cpu["windowed"].append(ray_cpu_since(rc))
            os.sync()
            c, rc = time.process_time(), ray_processes_cpu()
            t, e = marinbuild_run(args.steps, os.path.join(tmp, f"mb-{r}"), RayBackend(), f"r{r}")
            cpu["total"].append(time.process_time() - c)
            ray_cpu["total"].append(ray_cpu_since(rc))
            runs["total"].append(t)
            runs["execute"].append(e)
            os.sync()
            c = time.process_time()
            runs["local"].append(marinbuild_run(args.steps, os.path.join(tmp, f"local-{r}"), None, f"l{r}")[0])
            cpu["local"].append(time.process_time() - c)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(v) for k, v in runs.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    med_ray = {k: statistics.median(v) for k, v in ray_cpu.items()}
    p, t, e, n = med["plain"], med["total"], med["execute"], args.steps
    rows = [
        ("plain ray tasks", p, med_cpu["plain"], med_ray["plain"], True),
        ("plain ray tasks, 64 at a time, each end handled", *(m["windowed"] for m in (med, med_cpu, med_ray)), True),
        ("marinbuild, Ray backend (whole run)", t, med_cpu["total"], med_ray["total"], True),
        ("marinbuild, Ray backend (execute phase)", e, None, None, True),
        ("marinbuild, local backend (whole run)", med["local"], med_cpu["local"], None, False),
    ]
    load = os.getloadavg()[0]
    where = args.dir or tempfile.gettempdir()
    print(
        f"Ray backend benchmark: {n} trivial steps, fan-out, {args.rounds} round(s), medians; local Ray on "
        f"127.0.0.1 with {cpus} CPUs (started in {startup:.1f}s); steps write under {where}; load average "
        f"{load:.1f}"
    )
    print()
    table = [
        f"| {'what':<52} | {'seconds':>8} | {'ratio':>7} | {'overhead/step':>14} | {'CPU/step':>9} "
        f"| {'Ray CPU/step':>12} |",
        f"| {'-' * 52} | {'-' * 7}: | {'-' * 6}: | {'-' * 13}: | {'-' * 8}: | {'-' * 11}: |",
    ]
    for name, seconds, cpu_s, ray_s, ray_row in rows:
        overhead = f"{(seconds - p) / n * 1000:.2f} ms" if ray_row and seconds is not p else "-"
        cpu_text = f"{cpu_s / n * 1000:.2f} ms" if cpu_s is not None else "-"
        ray_text = f"{ray_s / n * 1000:.2f} ms" if ray_s else "-"
        table.append(
            f"| {name:<52} | {seconds:>8.3f} | {seconds / p:>6.2f}x | {overhead:>14} | {cpu_text:>9} | {ray_text:>12} |"
        )
    print("\n".join(table))
    both = {k: statistics.median(c + r for c, r in zip(cpu[k], ray_cpu[k], strict=True)) for k in ray_cpu}
    measured_ray = all(x > 0 for x in ray_cpu["plain"])  # (psutil present)
    ratio = both["total"] / both["plain"] if measured_ray else t / p
    what = "CPU per step, this process and Ray's together," if measured_ray else "whole run (seconds)"
    bar = f"Bar: {what} within {BAR}x of plain Ray tasks: {'PASS' if ratio <= BAR else 'FAIL'} ({ratio:.2f}x)."
    if measured_ray:
        bar += (
            f" {both['total'] / n * 1000:.2f} ms against plain Ray's {both['plain'] / n * 1000:.2f} ms "
            f"(CPU time is less disturbed by other load than seconds); against plain Ray 64 at a time, "
            f"{both['total'] / both['windowed']:.2f}x ({both['windowed'] / n * 1000:.2f} ms)."
        )
    print()
    print(bar)
    if args.doc:
        flags = [
            f"--{name}={getattr(args, name)}" for name, default in DEFAULTS.items() if getattr(args, name) != default
        ]
        command = shlex.join([".venv/bin/python", "bench/ray_bench.py", *flags])
        text = f"`{command}`: {n} trivial steps, {args.rounds} round(s), medians, {cpus} CPUs:\n\n" + "\n".join(table)
        write_section(args.doc, "ray_bench", text + "\n\n" + bar + "\n")
    print("Rounds (s): " + "; ".join(f"{k} " + ", ".join(f"{x:.2f}" for x in v) for k, v in runs.items()))
    if measured_ray:  # each round's pair, taken seconds apart: how much the machine's state moved the ratio
        pairs = zip(cpu["total"], ray_cpu["total"], cpu["plain"], ray_cpu["plain"], strict=True)
        print("CPU ratio by round: " + ", ".join(f"{(a + b) / (c + d):.2f}x" for a, b, c, d in pairs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "steps": n,
                    "rounds": args.rounds,
                    "cpus": cpus,
                    "dir": where,
                    "load_average": load,
                    "runs_s": runs,
                    "cpu_s": cpu,
                    "ray_processes_cpu_s": ray_cpu,
                    "ratio": t / p,
                    "execute_ratio": e / p,
                    "local_ratio": med["local"] / p,
                    "overhead_per_step_ms": (t - p) / n * 1000,
                    "cpu_ratio": both["total"] / both["plain"] if measured_ray else None,
                    "bar": BAR,
                    "pass": ratio <= BAR,
                },
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
