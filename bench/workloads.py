"""Equivalent workloads for every build tool the benchmark compares (``bench/run.py``).

One step graph, four spellings. For a shape and a size this module writes:

- ``script/workload.py``: a Marin-style experiment script of ``ExecutorStep``s. It runs with
  marinbuild's executor or with Marin's: ``MARINBUILD_BENCH_EXECUTOR=marin`` imports
  ``marin.execution``, anything else (default) imports ``marinbuild.executor``; ``=none`` builds the
  steps and stops before ``executor_main`` (what the script alone costs). Run it as a
  Marin script: ``python workload.py --prefix DIR``. The step function writes 16 bytes to
  ``<output_path>/out.txt``. The line ``SALTS: dict[int, int] = {}`` holds extra versioned
  values; ``set_script_salt`` edits it to change one node's version.
- ``ws/``: a BUILD.marin workspace spread over 100 packages (``p00`` ... ``p99``; node i is
  target ``//pKK:n<i>`` with K = i * 100 // N): ``pyproject.toml`` with ``[tool.marinbuild]``,
  ``steps.py`` with the step function, and BUILD files of
  ``python_step(name, fn = "steps:write16", config = {"i": i, "salt": 0}, deps = [...])``
  loaded with ``load("@marinbuild//rules:python.py", "python_step")``. ``set_build_salt``
  edits one target's ``salt``.
- ``ninja/build.ninja`` and ``make/Makefile``: node i reads its input ``in/n<i>`` (and its
  dependencies' outputs) and runs ``printf '%015d\\n' i > out/n<i>`` (16 bytes). Touching
  ``in/n<i>`` is how a node is changed for these two.

Shapes (fixed seed, so every run and every tool sees the same graph):

- ``chain``: node i depends on node i-1;
- ``fanout``: node 0 is the root; every other node depends on it;
- ``layered``: 10 layers of N/10 nodes; each node depends on 3 nodes of the layer before
  (``random.Random(0).sample``).
- ``sweep`` (Marin-shaped, realistic at 1,000): N/10 downloads, N/10 tokenizes (one per download),
  4N/10 trainings each on a mixture of 5 tokenized datasets (``random.Random(0).sample``), and an
  eval per training for the rest.
- ``roll`` (the tootsie roll's shape, realistic at 100): N/5 downloads, N/5 tokenizes, N/10 training
  phases in a chain (each from the one before, on a mixture of up to 8 tokenized datasets), an HF
  export per phase, and evals of the phases for the rest.

The *mid node* is the node an incremental rebuild changes: N/2 for ``chain`` and ``fanout``
(for ``fanout`` a leaf), the first node of layer 5 for ``layered``, the first tokenize for ``sweep``,
the middle phase for ``roll``. An incremental rebuild
must run exactly that node and its reverse dependencies: ``Graph.expected_incremental``.

Usage: ``python bench/workloads.py DIR --shape layered --size 1000`` writes all four.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

SHAPES = ("chain", "fanout", "layered", "sweep", "roll")
KINDS = ("script", "ws", "ninja", "make")
LAYERS = 10
LAYER_FANIN = 3
SEED = 0
PACKAGES = 100
EXECUTOR_ENV = "MARINBUILD_BENCH_EXECUTOR"


@dataclass(frozen=True)
class Graph:
    """A step graph: ``deps[i]`` lists the nodes node i depends on (all < i)."""

    shape: str
    deps: tuple[tuple[int, ...], ...]
    mid: int

    @property
    def n(self) -> int:
        return len(self.deps)

    @cached_property
    def dependents(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for i, ds in enumerate(self.deps):
            for d in ds:
                out[d].append(i)
        return out

    def reverse_closure(self, node: int) -> set[int]:
        """``node`` and every node that depends on it, directly or not."""
        seen = {node}
        todo = [node]
        while todo:
            for j in self.dependents[todo.pop()]:
                if j not in seen:
                    seen.add(j)
                    todo.append(j)
        return seen

    @cached_property
    def expected_incremental(self) -> int:
        """How many actions an incremental rebuild after changing the mid node must run."""
        return len(self.reverse_closure(self.mid))

    def package_of(self, i: int) -> str:
        return f"p{i * PACKAGES // self.n:02d}"

    def label_of(self, i: int) -> str:
        return f"//{self.package_of(i)}:n{i}"


def make_graph(shape: str, n: int) -> Graph:
    """The graph of ``shape`` with ``n`` nodes (deterministic)."""
    if n < 2:
        raise ValueError("a workload needs at least 2 nodes")
    deps: list[tuple[int, ...]] = []
    if shape == "chain":
        deps = [()] + [(i - 1,) for i in range(1, n)]
        mid = n // 2
    elif shape == "fanout":
        deps = [()] + [(0,) for _ in range(1, n)]
        mid = n // 2
    elif shape == "layered":
        rng = random.Random(SEED)
        widths = [n // LAYERS + (1 if k < n % LAYERS else 0) for k in range(LAYERS)]
        previous: list[int] = []
        mid = -1
        for k, width in enumerate(widths):
            layer = list(range(len(deps), len(deps) + width))
            if k == LAYERS // 2:
                mid = layer[0]
            for _ in layer:
                deps.append(tuple(rng.sample(previous, min(LAYER_FANIN, len(previous)))) if previous else ())
            previous = layer
    elif shape == "sweep":
        deps, mid = _sweep(n)
    elif shape == "roll":
        deps, mid = _roll(n)
    else:
        raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    assert len(deps) == n and 0 <= mid < n
    return Graph(shape, tuple(deps), mid)


def _sweep(n: int) -> tuple[list[tuple[int, ...]], int]:
    """Downloads, a tokenize of each, trainings on mixtures of 5 tokenized sets, an eval of each training."""
    if n < 20:
        raise ValueError("a sweep needs at least 20 nodes")
    rng = random.Random(SEED)
    sets = n // 10
    downloads = [() for _ in range(sets)]
    tokenizes = [(i,) for i in range(sets)]
    first_training = 2 * sets
    trainings = [tuple(sorted(rng.sample(range(sets, 2 * sets), 5))) for _ in range(4 * n // 10)]
    evals = [(first_training + k % len(trainings),) for k in range(n - 2 * sets - len(trainings))]
    return [*downloads, *tokenizes, *trainings, *evals], sets


def _roll(n: int) -> tuple[list[tuple[int, ...]], int]:
    """Downloads, their tokenizes, a chain of phases on mixtures, an export of each phase, evals of the phases."""
    if n < 20:
        raise ValueError("a roll needs at least 20 nodes")
    rng = random.Random(SEED)
    sets, phases = n // 5, n // 10
    deps: list[tuple[int, ...]] = [() for _ in range(sets)] + [(i,) for i in range(sets)]
    first_phase = len(deps)
    for k in range(phases):
        mixture = tuple(sorted(rng.sample(range(sets, 2 * sets), min(8, sets))))
        deps.append(((first_phase + k - 1,) if k else ()) + mixture)
    deps += [(first_phase + k,) for k in range(phases)]  # an HF export of each phase
    deps += [(first_phase + k % phases,) for k in range(n - len(deps))]  # evals
    return deps, first_phase + phases // 2


# -- (a) the ExecutorStep script -------------------------------------------------------------------

SCRIPT = '''\
"""Benchmark workload: {n} trivial ExecutorSteps, shape {shape} (generated by bench/workloads.py).

Runs with marinbuild's executor (default) or Marin's ({env}=marin); {env}=none
makes the steps and stops (the script's own cost, no build):
    python workload.py --prefix DIR
"""

import os
from dataclasses import dataclass

if os.environ.get("{env}") == "marin":
    from marin.execution import ExecutorStep, executor_main, output_path_of, this_output_path, versioned
else:
    from marinbuild.executor import ExecutorStep, executor_main, output_path_of, this_output_path, versioned

SALTS: dict[int, int] = {{}}

DEPS = {deps}


@dataclass(frozen=True)
class NodeConfig:
    input_paths: list
    i: int
    salt: int
    output_path: str


def write16(config: NodeConfig) -> None:
    """The step: write 16 bytes to <output_path>/out.txt."""
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "out.txt"), "w") as f:
        f.write(f"{{config.i:015d}}\\n")


steps = []
for i, node_deps in enumerate(DEPS):
    config = NodeConfig(
        input_paths=[output_path_of(steps[d]) for d in node_deps],
        i=versioned(i),
        salt=versioned(SALTS.get(i, 0)),
        output_path=this_output_path(),
    )
    steps.append(ExecutorStep(name=f"{shape}/n{{i}}", fn=write16, config=config))

if __name__ == "__main__" and os.environ.get("{env}") != "none":
    executor_main(steps=steps, description="bench workload {shape} x {n}")
'''

_SALTS_LINE = re.compile(r"^SALTS: dict\[int, int\] = .*$", re.MULTILINE)


def write_script(folder: Path, graph: Graph) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    deps = "[" + ", ".join("[" + ", ".join(map(str, ds)) + "]" for ds in graph.deps) + "]"
    path = folder / "workload.py"
    path.write_text(SCRIPT.format(n=graph.n, shape=graph.shape, env=EXECUTOR_ENV, deps=deps))
    return path


def set_script_salt(script: Path, node: int, salt: int) -> None:
    """Give ``node`` of a generated script a new versioned ``salt`` (its version changes)."""
    text = script.read_text()
    new, count = _SALTS_LINE.subn(f"SALTS: dict[int, int] = {{{node}: {salt}}}", text)
    if count != 1:
        raise ValueError(f"{script}: no SALTS line to edit")
    script.write_text(new)


# -- (b) the BUILD.marin workspace -----------------------------------------------------------------

STEPS_PY = '''\
"""The step function of the benchmark workspace (generated by bench/workloads.py)."""

import os


def write16(config: dict) -> None:
    """Write 16 bytes to <output_path>/out.txt."""
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(f"{config['i']:015d}\\n")
'''


def _target_line(graph: Graph, i: int, salt: int = 0) -> str:
    package = graph.package_of(i)
    labels = [f":n{d}" if graph.package_of(d) == package else graph.label_of(d) for d in graph.deps[i]]
    deps = ", ".join(f'"{label}"' for label in labels)
    return f'python_step(name = "n{i}", fn = "steps:write16", config = {{"i": {i}, "salt": {salt}}}, deps = [{deps}])'


def write_workspace(folder: Path, graph: Graph) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(
        '[project]\nname = "bench-workspace"\nversion = "0"\n\n[tool.marinbuild]\nprefix = "prefix"\n'
    )
    (folder / "steps.py").write_text(STEPS_PY)
    by_package: dict[str, list[int]] = {}
    for i in range(graph.n):
        by_package.setdefault(graph.package_of(i), []).append(i)
    for package, nodes in by_package.items():
        lines = ['load("@marinbuild//rules:python.py", "python_step")', ""]
        lines += [_target_line(graph, i) for i in nodes]
        (folder / package).mkdir(exist_ok=True)
        (folder / package / "BUILD.marin").write_text("\n".join(lines) + "\n")
    return folder


def set_build_salt(workspace: Path, graph: Graph, node: int, salt: int) -> Path:
    """Give target ``n<node>`` a new ``salt`` in its BUILD file; returns the file."""
    path = workspace / graph.package_of(node) / "BUILD.marin"
    text = path.read_text()
    pattern = re.compile(rf'^python_step\(name = "n{node}", .*$', re.MULTILINE)
    new, count = pattern.subn(lambda _: _target_line(graph, node, salt), text)
    if count != 1:
        raise ValueError(f"{path}: no target n{node} to edit")
    path.write_text(new)
    return path


# -- (c) build.ninja and (d) Makefile --------------------------------------------------------------

PRINTF = "printf '%015d\\n'"


def _write_inputs(folder: Path, graph: Graph) -> None:
    (folder / "in").mkdir(parents=True, exist_ok=True)
    (folder / "out").mkdir(exist_ok=True)
    for i in range(graph.n):
        (folder / "in" / f"n{i}").write_text(f"{i}\n")


def write_ninja(folder: Path, graph: Graph) -> Path:
    _write_inputs(folder, graph)
    lines = ["# generated by bench/workloads.py", "rule w", f"  command = {PRINTF} $i > $out", ""]
    for i, ds in enumerate(graph.deps):
        implicit = " | " + " ".join(f"out/n{d}" for d in ds) if ds else ""
        lines.append(f"build out/n{i}: w in/n{i}{implicit}")
        lines.append(f"  i = {i}")
    lines.append("build all: phony " + " ".join(f"out/n{i}" for i in range(graph.n)))
    lines.append("default all")
    path = folder / "build.ninja"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_make(folder: Path, graph: Graph) -> Path:
    _write_inputs(folder, graph)
    lines = [
        "# generated by bench/workloads.py",
        "MAKEFLAGS += -rR",
        ".SUFFIXES:",
        ".PHONY: all",
        "all: " + " ".join(f"out/n{i}" for i in range(graph.n)),
        "",
    ]
    for i, ds in enumerate(graph.deps):
        prereqs = " ".join([f"in/n{i}", *(f"out/n{d}" for d in ds)])
        lines.append(f"out/n{i}: {prereqs}")
        lines.append(f"\t@{PRINTF} {i} > $@")
    path = folder / "Makefile"
    path.write_text("\n".join(lines) + "\n")
    return path


def touch_input(folder: Path, node: int, content: str) -> None:
    """Change node ``node`` of a ninja/make workload: new content, a new mtime."""
    path = folder / "in" / f"n{node}"
    path.write_text(content)
    output = folder / "out" / f"n{node}"
    # File times come from a coarse kernel clock: make sure the input is strictly newer than the output.
    newer = max(path.stat().st_mtime_ns, output.stat().st_mtime_ns + 1_000_000 if output.exists() else 0)
    os.utime(path, ns=(newer, newer))


# -- all of it --------------------------------------------------------------------------------------


def write_workload(folder: str | os.PathLike[str], shape: str, n: int, kinds: Iterable[str] = KINDS) -> Graph:
    """Write the workload's ``kinds`` (script, ws, ninja, make) under ``folder``; return its graph."""
    root = Path(folder)
    graph = make_graph(shape, n)
    writers = {"script": write_script, "ws": write_workspace, "ninja": write_ninja, "make": write_make}
    for kind in kinds:
        if kind not in writers:
            raise ValueError(f"unknown workload kind {kind!r}; known: {', '.join(KINDS)}")
        writers[kind](root / kind, graph)
    root.mkdir(parents=True, exist_ok=True)
    (root / "graph.json").write_text(
        json.dumps(
            {
                "shape": shape,
                "n": n,
                "mid": graph.mid,
                "mid_label": graph.label_of(graph.mid),
                "expected_incremental": graph.expected_incremental,
                "deps": [list(d) for d in graph.deps],
            }
        )
    )
    return graph


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write one benchmark workload (script, workspace, ninja, make).")
    parser.add_argument("folder")
    parser.add_argument("--shape", choices=SHAPES, default="layered")
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args(argv)
    graph = write_workload(args.folder, args.shape, args.size, args.kinds)
    print(
        f"wrote {args.shape} x {graph.n} to {args.folder}: mid node {graph.mid} ({graph.label_of(graph.mid)}), "
        f"an incremental rebuild runs {graph.expected_incremental} actions"
    )


if __name__ == "__main__":
    main()
