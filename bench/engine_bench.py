"""Engine benchmark: how marinbuild's executor scales with the number of steps.

What it measures, for graphs of trivial steps (each writes 16 bytes to ``<output_path>/out.txt``):

- import time of ``marinbuild.executor`` (fresh interpreter, median of 5 runs);
- version computation: ``Executor.compute_versions`` over every step (as ``Executor.run`` computes them), no I/O;
- cold run: ``Executor(...).run(steps)`` against a fresh, empty prefix under /tmp;
- no-op rerun: a NEW process runs ``Executor(...).run(steps)`` against the same prefix, so it
  computes versions, plans, reads every status and finds everything built (the whole call is timed);
- peak RSS of each phase (``resource.getrusage`` in the process that ran only that phase).

Graph shapes (``--shapes``), each at every size N (``--sizes``):

- ``chain``: step i depends on step i-1;
- ``fanout``: one root, N-1 children each depending on the root;
- ``layered``: 10 layers of N/10 steps; each step depends on 3 random steps of the previous layer (seed 0).

Every phase runs in its own subprocess: the script re-invokes itself with
``--one SHAPE SIZE PHASE PREFIX`` and reads one JSON line back. Cold and no-op runs share the
script name and the step function's module (``__main__``), so the no-op finds the run's info file
too. Nothing here asserts on timings; the bars from the issue are reported as pass/fail at the end.
A phase that crashes shows as ``error`` and is listed under "Problems"; ``--keep`` keeps the
temporary prefixes for inspection.

Run (from the repository root; all shapes at 1k and 10k steps take a few minutes)::

    .venv/bin/python bench/engine_bench.py
    .venv/bin/python bench/engine_bench.py --sizes 1000 --shapes chain layered --json /tmp/bench.json
    .venv/bin/python bench/engine_bench.py --sizes 1000 10000 --doc docs/performance.md   # its table there
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = ("chain", "fanout", "layered")
PHASES = ("versions", "cold", "noop")
LAYERS = 10
LAYER_FANIN = 3
IMPORT_REPEATS = 5
IMPORT_SNIPPET = "import time; t=time.perf_counter(); import marinbuild.executor; print(time.perf_counter()-t)"

# The bars from the issue.
BAR_IMPORT_S = 0.3
BAR_VERSIONS_10K_S = 0.5
BAR_COLD_CHAIN_1K_S = 3.0
BAR_NOOP_LAYERED_10K_S = 1.0
BAR_NOOP_LAYERED_10K_MB = 300.0


# -- the steps ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    input_paths: list
    i: Any
    output_path: Any


def write_out(config: BenchConfig) -> None:
    """The step: write 16 bytes to ``<output_path>/out.txt``."""
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "out.txt"), "w") as f:
        f.write(f"{config.i:015d}\n")


def build_steps(shape: str, n: int) -> list:
    """The N steps of ``shape``, dependencies before consumers."""
    from marinbuild.executor import ExecutorStep, output_path_of, this_output_path, versioned

    def step(i: int, deps: list) -> Any:
        config = BenchConfig(
            input_paths=[output_path_of(d) for d in deps],
            i=versioned(i),
            output_path=this_output_path(),
        )
        return ExecutorStep(name=f"bench/{shape}/{i}", fn=write_out, config=config)

    steps: list = []
    if shape == "chain":
        for i in range(n):
            steps.append(step(i, [steps[-1]] if steps else []))
    elif shape == "fanout":
        root = step(0, [])
        steps = [root] + [step(i, [root]) for i in range(1, n)]
    elif shape == "layered":
        rng = random.Random(0)
        per_layer = [n // LAYERS + (1 if k < n % LAYERS else 0) for k in range(LAYERS)]
        previous: list = []
        i = 0
        for width in per_layer:
            layer = []
            for _ in range(width):
                deps = rng.sample(previous, min(LAYER_FANIN, len(previous))) if previous else []
                layer.append(step(i, deps))
                i += 1
            steps.extend(layer)
            previous = layer
    else:
        raise ValueError(f"unknown shape {shape!r}")
    assert len(steps) == n
    return steps


# -- one phase, in a child process -----------------------------------------------------------------


def peak_rss_mb() -> float:
    """Peak resident set size of this process in MB (ru_maxrss is KB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def run_one(shape: str, n: int, phase: str, prefix: str) -> dict:
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("marinbuild").setLevel(logging.WARNING)
    from marinbuild.executor import Executor

    t0 = time.perf_counter()
    steps = build_steps(shape, n)
    build_s = time.perf_counter() - t0
    result: dict[str, Any] = {"shape": shape, "steps": n, "phase": phase, "build_graph_s": build_s}
    base = os.path.join(prefix, "experiments")

    if phase == "versions":
        t0, c0 = time.perf_counter(), time.process_time()
        executor = Executor(prefix=prefix, executor_info_base_path=base, listeners=[])
        executor.compute_versions(steps)  # what Executor.run does
        result["seconds"] = time.perf_counter() - t0
        result["cpu_seconds"] = time.process_time() - c0
        result["distinct_versions"] = len(executor.steps)
    elif phase in ("cold", "noop"):
        t0, c0 = time.perf_counter(), time.process_time()
        executor = Executor(prefix=prefix, executor_info_base_path=base, listeners=[])
        executor.run(steps)
        result["seconds"] = time.perf_counter() - t0
        result["cpu_seconds"] = time.process_time() - c0
        result["planned"] = len(executor.plan.steps)
        result["ran"] = len(executor.plan.to_run)
    else:
        raise ValueError(f"unknown phase {phase!r}")
    result["peak_rss_mb"] = peak_rss_mb()
    return result


# -- the driver ------------------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """The environment of a measured child: the repository importable, bytecode caching on (as in a user's shell)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = REPO_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def measure_import() -> dict:
    times = []
    for _ in range(IMPORT_REPEATS):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_SNIPPET],
            cwd=REPO_ROOT,
            env=child_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        times.append(float(out.stdout.strip().splitlines()[-1]))
    return {"median_s": statistics.median(times), "runs_s": times}


def measure_phase(shape: str, n: int, phase: str, prefix: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", shape, str(n), phase, prefix]
    proc = subprocess.run(cmd, cwd=REPO_ROOT, env=child_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(line[:300] for line in proc.stderr.strip().splitlines()[-15:])
        print(
            f"phase {phase} of {shape} x {n} failed (exit {proc.returncode}): {shlex.join(cmd)}\n{tail}",
            file=sys.stderr,
            flush=True,
        )
        return {"shape": shape, "steps": n, "phase": phase, "error": tail.splitlines()[-1] if tail else "failed"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def total_memory_mb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def nproc() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def cell(result: dict, key: str, digits: int = 3) -> str:
    return "error" if "error" in result else fmt(result.get(key), digits)


def bar_row(name: str, value: float | None, limit: float, unit: str) -> tuple[str, str, str, str]:
    if value is None:
        return name, "n/a", f"< {limit:g} {unit}", "not measured"
    return name, f"{value:.3f} {unit}", f"< {limit:g} {unit}", "PASS" if value < limit else "FAIL"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--json", metavar="FILE", help="also write the raw numbers to FILE")
    parser.add_argument("--keep", action="store_true", help="keep the temporary prefixes of the runs")
    parser.add_argument(
        "--doc", metavar="FILE", help="write the table into FILE (docs/performance.md), between markers"
    )
    parser.add_argument("--one", nargs=4, metavar=("SHAPE", "SIZE", "PHASE", "PREFIX"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.one:
        shape, size, phase, prefix = args.one
        print(json.dumps(run_one(shape, int(size), phase, prefix)))
        return 0

    mem = total_memory_mb()
    print("# marinbuild engine benchmark\n")
    print(f"- date: {datetime.now().astimezone().isoformat(timespec='seconds')}")
    print(f"- nproc: {nproc()}")
    print(f"- total memory: {fmt(mem / 1024 if mem else None, 1)} GB")
    print(f"- python: {sys.version.split()[0]} ({sys.executable})")
    print(f"- command: {shlex.join([sys.executable, *sys.argv])}\n", flush=True)

    raw: dict[str, Any] = {
        "date": datetime.now().astimezone().isoformat(),
        "nproc": nproc(),
        "total_memory_mb": mem,
        "command": [sys.executable, *sys.argv],
        "rows": [],
    }
    raw["import"] = imp = measure_import()
    print(
        f"import marinbuild.executor: median {imp['median_s']:.3f} s over {IMPORT_REPEATS} fresh interpreters\n",
        flush=True,
    )

    problems = []
    finished_prefixes: list[str] = []
    for n in args.sizes:
        for shape in args.shapes:
            row: dict[str, Any] = {"shape": shape, "steps": n}
            prefix = tempfile.mkdtemp(prefix=f"marinbuild-bench-{shape}-{n}-")  # under $TMPDIR (default /tmp)
            try:
                row["versions"] = measure_phase(shape, n, "versions", prefix)
                row["cold"] = measure_phase(shape, n, "cold", prefix)
                if "error" in row["cold"]:
                    row["noop"] = {"phase": "noop", "error": "not measured: the cold run failed"}
                else:
                    row["noop"] = measure_phase(shape, n, "noop", prefix)
            finally:
                # deleted after the last row: on this VM deleting thousands of files slows the next file creations
                finished_prefixes.append(prefix)
            row["prefix"] = prefix
            for phase in PHASES:
                if "error" in row[phase]:
                    problems.append(f"{shape}/{n}: {phase} failed: {row[phase]['error']}")
            if row["cold"].get("ran", n) != n:
                problems.append(f"{shape}/{n}: cold run planned {row['cold']['ran']} of {n} steps to run")
            if row["noop"].get("ran", 0) != 0:
                problems.append(f"{shape}/{n}: no-op rerun planned {row['noop']['ran']} steps to run (expected 0)")
            raw["rows"].append(row)
            print(
                f"  measured {shape} x {n}: versions {fmt(row['versions'].get('seconds'))} s, "
                f"cold {fmt(row['cold'].get('seconds'))} s, no-op {fmt(row['noop'].get('seconds'))} s, "
                f"no-op RSS {fmt(row['noop'].get('peak_rss_mb'), 0)} MB",
                file=sys.stderr,
                flush=True,
            )
    if not args.keep:
        for prefix in finished_prefixes:
            shutil.rmtree(prefix, ignore_errors=True)

    header = [
        "shape",
        "steps",
        "versions (s)",
        "cold run (s)",
        "no-op (s)",
        "no-op peak RSS (MB)",
        "cold peak RSS (MB)",
        "versions peak RSS (MB)",
    ]
    rows = [
        [
            r["shape"],
            str(r["steps"]),
            cell(r["versions"], "seconds"),
            cell(r["cold"], "seconds"),
            cell(r["noop"], "seconds"),
            cell(r["noop"], "peak_rss_mb", 0),
            cell(r["cold"], "peak_rss_mb", 0),
            cell(r["versions"], "peak_rss_mb", 0),
        ]
        for r in raw["rows"]
    ]
    table = markdown_table(header, rows)
    print(table)

    def find(shape: str, n: int, phase: str, key: str) -> float | None:
        for r in raw["rows"]:
            if r["shape"] == shape and r["steps"] == n:
                return r[phase].get(key)
        return None

    versions_10k = [r for r in raw["rows"] if r["steps"] == 10000 and "seconds" in r["versions"]]
    worst = max(versions_10k, key=lambda r: r["versions"]["seconds"]) if versions_10k else None
    bars = [
        bar_row("import marinbuild.executor", imp["median_s"], BAR_IMPORT_S, "s"),
        bar_row(
            f"versions, 10k steps (slowest shape: {worst['shape'] if worst else 'n/a'})",
            worst["versions"]["seconds"] if worst else None,
            BAR_VERSIONS_10K_S,
            "s",
        ),
        bar_row("cold run, 1,000-step chain", find("chain", 1000, "cold", "seconds"), BAR_COLD_CHAIN_1K_S, "s"),
        bar_row(
            "no-op rerun, 10k-step layered", find("layered", 10000, "noop", "seconds"), BAR_NOOP_LAYERED_10K_S, "s"
        ),
        bar_row(
            "no-op rerun peak RSS, 10k-step layered",
            find("layered", 10000, "noop", "peak_rss_mb"),
            BAR_NOOP_LAYERED_10K_MB,
            "MB",
        ),
    ]
    raw["bars"] = [dict(zip(("bar", "measured", "limit", "result"), b, strict=True)) for b in bars]
    print()
    print(markdown_table(["bar", "measured", "limit", "result"], [list(b) for b in bars]))
    if problems:
        raw["problems"] = problems
        print("\nProblems (the numbers above may not mean what they say):")
        for p in problems:
            print(f"- {p}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=2)
        print(f"\nraw numbers written to {args.json}")
    if args.doc:
        if problems:
            print(f"\n{args.doc} left as it is: the run had problems", file=sys.stderr)
            return 1
        flags = ["--sizes", *map(str, args.sizes)]
        if list(args.shapes) != list(SHAPES):
            flags += ["--shapes", *args.shapes]
        command = shlex.join([".venv/bin/python", "bench/engine_bench.py", *flags])
        write_section(args.doc, "engine_bench", f"`{command}`:\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
