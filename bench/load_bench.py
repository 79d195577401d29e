"""Loading speed of BUILD.marin files (Starlark, through starlark-pyo3), and the no-op build it must not slow.

A synthetic workspace of N targets in 100 packages (``tokenize`` and ``train`` rules of a
workspace rules module, a ``load()``ed ``.star`` file of constants, labels across packages,
source files) is loaded:

- cold, in a fresh process: a new interpreter imports marinbuild and times
  ``Loader(workspace).load_all()`` (read, check, parse and evaluate every file with Starlark,
  import the rules module, validate attributes, resolve labels, stat source files); the bar:
  at least 10,000 targets per second at 10,000 targets;
- the whole ``marinbuild query //...`` process (interpreter start, imports, load, printing);
- again in the same process (the rules module already imported).

With ``--noop``, it also builds bench/workloads.py's layered workspace of N ``python_step``
targets and times the no-op ``marinbuild //...`` that follows (median of ``--repeat`` runs).
``--doc FILE`` writes the table between the ``<!-- load_bench -->`` markers of FILE
(docs/performance.md).

Usage: python bench/load_bench.py [--sizes 1000 10000] [--packages 100] [--repeat 3] [--noop] [--doc FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)

from marinbuild.load import Loader, Workspace  # noqa: E402

RULES = """
from dataclasses import dataclass

from marinbuild.load import attr, rule


@dataclass
class Optim:
    lr: float = 3e-4
    warmup: int = 100


def _impl(ctx):
    return None


tokenize = rule(
    implementation=_impl,
    attrs={"srcs": attr.source_files(), "tokenizer": attr.string(default="llama3")},
)
train = rule(
    implementation=_impl,
    attrs={
        "data": attr.label_keyed_dict(value=float, mandatory=True),
        "deps": attr.label_list(),
        "steps": attr.int(default=1000),
        "optim": attr.config(Optim),
        "resources": attr.dict(versioned=False),
    },
)
"""

MACROS = """
TOKENIZER = "llama3"
RESOURCES = {"tpu": "v4-8"}
"""


def build_file(pkg_index: int, count: int) -> str:
    lines = [
        'load("//rules:bench.py", "tokenize", "train")',
        'load("//lib:macros.star", "TOKENIZER", "RESOURCES")',
        "",
    ]
    for i in range(count):
        if i % 2 == 0:
            lines.append(
                f'tokenize(\n    name = "tok_{i}",\n    srcs = ["data/a.jsonl", "data/b.jsonl"],\n'
                "    tokenizer = TOKENIZER,\n)"
            )
        else:
            data = f'{{":tok_{i - 1}": 0.7'
            if pkg_index > 0 and i % 10 == 1:
                data += f', "//exp/p{pkg_index - 1:03d}:tok_0": 0.3'
            data += "}"
            lines.append(
                f'train(\n    name = "model_{i}",\n    data = {data},\n    steps = {1000 + i},\n'
                f'    optim = {{"lr": 0.001, "warmup": {i}}},\n    resources = RESOURCES,\n)'
            )
    return "\n".join(lines) + "\n"


def make_workspace(root: Path, targets: int, packages: int) -> None:
    (root / "pyproject.toml").write_text("[tool.marinbuild]\n")
    (root / "rules").mkdir()
    (root / "rules" / "bench.py").write_text(RULES)
    (root / "lib").mkdir()
    (root / "lib" / "macros.star").write_text(MACROS)
    per = targets // packages
    for p in range(packages):
        pkg = root / "exp" / f"p{p:03d}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "data" / "a.jsonl").write_text("{}\n")
        (pkg / "data" / "b.jsonl").write_text("{}\n")
        (pkg / "BUILD.marin").write_text(build_file(p, per))


FRESH_LOAD = """
import json, os, sys, time
from marinbuild.load import Loader, find_workspace
def cpu():
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system
workspace = find_workspace(sys.argv[1])
t0, c0 = time.perf_counter(), cpu()
n = len(Loader(workspace).load_all())
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": cpu() - c0, "targets": n}))
"""


def cpu_seconds() -> float:
    """CPU time of this process and of its children it waited for: BUILD files are evaluated in a child."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


Row = tuple[str, float, float | None, int]
"""(what, wall seconds, CPU seconds or None, targets)."""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def fresh_process_load(root: Path, repeat: int) -> Row:
    """The best of ``repeat`` loads, each in a new interpreter (after one untimed warm-up of the disk)."""
    samples = []
    for k in range(repeat + 1):
        out = subprocess.run(
            [sys.executable, "-c", FRESH_LOAD, str(root)], capture_output=True, text=True, env=_env(), check=True
        )
        if k:
            samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    best = min(samples, key=lambda s: s["seconds"])
    return ("cold, fresh process: `Loader.load_all()`", best["seconds"], best["cpu"], best["targets"])


def query_process(root: Path, repeat: int, n: int) -> Row:
    """The best wall time of ``marinbuild query //...`` as a whole process."""
    times = []
    for k in range(repeat + 1):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "marinbuild", "query", "//...", "--output", "label"],
            cwd=root,
            env=_env(),
            check=True,
            capture_output=True,
        )
        if k:
            times.append(time.perf_counter() - start)
    return ("whole process: `marinbuild query //...`", min(times), None, n)


def in_process(root: Path, repeat: int) -> Row:
    workspace = Workspace(root, {})
    Loader(workspace).load_all()
    best = cpu_best = float("inf")
    n = 0
    for _ in range(repeat):
        start, cpu = time.perf_counter(), cpu_seconds()
        n = len(Loader(workspace).load_all())
        best = min(best, time.perf_counter() - start)
        cpu_best = min(cpu_best, cpu_seconds() - cpu)
    return ("again in the same process (rules module imported)", best, cpu_best, n)


def noop_build(root: Path, n: int, repeat: int) -> Row:
    """Build bench/workloads.py's layered workspace of ``n`` targets, then time ``marinbuild //...`` (median)."""
    from workloads import make_graph, write_workspace

    ws = write_workspace(root / "noop", make_graph("layered", n))
    env = _env()
    env["MARIN_PREFIX"] = str(ws / "prefix")
    cmd = [sys.executable, "-m", "marinbuild", "//..."]
    subprocess.run(cmd, cwd=ws, env=env, check=True, capture_output=True)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=ws, env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return (f"no-op `marinbuild //...` on {n:,} built targets (median)", statistics.median(times), None, n)


def table(rows: list[Row], header: str) -> str:
    lines = [
        header,
        "",
        "| targets | what | seconds | targets/s | CPU seconds | targets/CPU s |",
        "| ---: | --- | ---: | ---: | ---: | ---: |",
    ]
    for what, seconds, cpu, n in rows:
        rate = f"{n / seconds:,.0f}" if "no-op" not in what else ""
        cpu_text = f"{cpu:.3f}" if cpu is not None else ""
        cpu_rate = f"{n / cpu:,.0f}" if cpu else ""
        lines.append(f"| {n:,} | {what} | {seconds:.3f} | {rate} | {cpu_text} | {cpu_rate} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--packages", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--noop", action="store_true", help="also time the no-op build of the largest size")
    parser.add_argument("--doc", type=Path, help="write the table into this markdown file, between markers")
    args = parser.parse_args(argv)
    header = (
        f"`python bench/load_bench.py {' '.join(argv if argv is not None else sys.argv[1:])}`: Python "
        f"{platform.python_version()}, {args.packages} packages, best of {args.repeat} (no-op: median), "
        f"{os.cpu_count()} cores."
    )
    rows: list[Row] = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory(prefix="marinbuild-bench-") as tmp:
            root = Path(tmp)
            make_workspace(root, size, args.packages)
            rows.append(fresh_process_load(root, args.repeat))
            rows.append(query_process(root, args.repeat, size))
            rows.append(in_process(root, args.repeat))
    if args.noop:
        with tempfile.TemporaryDirectory(prefix="marinbuild-bench-") as tmp:
            rows.append(noop_build(Path(tmp), max(args.sizes), args.repeat))
    text = table(rows, header)
    print(text)
    if args.doc is not None:
        write_section(args.doc, "load_bench", text)


if __name__ == "__main__":
    main()
