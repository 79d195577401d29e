"""marinbuild beside ninja, make and Marin's executor: the same step graphs, the same machine, one run.

For every shape (chain, fanout, layered) and size, ``bench/workloads.py`` writes the same graph
for each tool; every action writes 16 bytes. This driver times whole processes (wall time from
spawn to exit, and the peak RSS that ``wait4`` reports for that process tree: the largest single
process in it) for three phases:

- ``cold``: nothing built (outputs and build state removed), build everything;
- ``noop``: everything built, build again: nothing may run;
- ``incremental``: change the mid node (a versioned value in the script/BUILD file for
  marinbuild and Marin; a touched input file for ninja and make), build: exactly that node and
  its reverse dependencies must run.

Each phase runs once as a warm-up, then ``--runs`` times; the table shows the median. The
actions that ran are counted from the outputs written (new or changed files) and checked
against the graph: which nodes, not only how many. A phase whose warm-up takes longer than
``--slow`` seconds is measured once (the warm-up is the sample) and says so.

Peers: ``ninja`` and ``make`` (the system's; ``make -j`` gets ninja's default parallelism),
``marin`` (Marin's executor from PyPI ``marin-core``, installed on first use into its own
virtualenv ``bench/.peers/marin``; never a dependency of marinbuild), ``marinbuild-api`` (the
ExecutorStep script run with ``marinbuild.executor``) and ``marinbuild-cli`` (``marinbuild
//...`` on the BUILD.marin workspace). With ``marinbuild-cli``, the rows of the BUILD/CLI issue
are measured too, on the layered workspaces (100 packages): ``marinbuild --help``, load
(``marinbuild query //...`` as a process, and the loader timed inside a fresh process),
queries (``deps(//...)``, ``rdeps(//..., <mid>)``) and the no-op build.
``--gcs`` and ``--ray`` run ``bench/gcs_bench.py`` and ``bench/ray_bench.py`` and include their
tables.

Output: markdown on stdout (progress on stderr), raw numbers as JSON (``--json``, default
``bench/out/run-<time>.json``). Examples (from the repository root)::

    .venv/bin/python bench/run.py                                   # 100 and 1k steps, ~5 minutes
    .venv/bin/python bench/run.py --sizes 1000 10000                # docs/performance.md's tables
    .venv/bin/python bench/run.py --peers marin marinbuild-api --sizes 100 --shapes layered
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import (  # noqa: E402  (bench/ is not a package)
    EXECUTOR_ENV,
    SHAPES,
    Graph,
    make_graph,
    set_build_salt,
    set_script_salt,
    touch_input,
    write_workload,
)

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PEERS = ("ninja", "make", "marin", "marinbuild-api", "marinbuild-cli")
DEFAULT_PEERS = ("ninja", "make", "marinbuild-api", "marinbuild-cli")
MARINBUILD_PEERS = ("marinbuild-api", "marinbuild-cli")
PHASES = ("cold", "noop", "incremental")
PEER_TITLES = {
    "ninja": "ninja",
    "make": "make",
    "marin": "Marin",
    "marinbuild-api": "marinbuild API",
    "marinbuild-cli": "marinbuild CLI",
}
MARIN_VENV = BENCH / ".peers" / "marin"
MARIN_PACKAGES = ("marin-core", "gitpython")  # levanter (imported by marin-core) needs git; marin-core omits it

# The bars of the issues.
BAR_REALISTIC_NOOP_S = 0.5  # the roll (100 steps) and the 1,000-step sweep, CLI no-op
BAR_REALISTIC_EDIT_S = 1.0  # their rebuild after an edit, beyond the steps' own time
BAR_10K_NOOP_S, BAR_10K_EDIT_S, BAR_10K_MB = 3.0, 6.0, 500.0  # layered 10,000, CLI
BAR_100K_MB = 1024.0  # layered 100,000: versions and no-op finish under 1 GB
BAR_HELP_S = 0.3

LOADER_SNIPPET = """
import json, sys, time
from marinbuild.load import Loader, find_workspace
workspace = find_workspace(sys.argv[1])
t0 = time.perf_counter()
loaded = Loader(workspace).load_all()
print(json.dumps({"seconds": time.perf_counter() - t0, "targets": len(loaded.targets)}))
"""
"""The loader as ``marinbuild query`` runs it, in a fresh process each time (Starlark keeps no cache
between processes). Timed from the ``Loader`` call: imports the load needs on first use (the rules
modules and what they import) are counted, the interpreter's start is not."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Trash:
    """Old outputs are moved here (one rename) and deleted when the bench ends, never just before a build.

    On this VM's ext4 (mounted with ``discard``), deleting a few thousand files makes creating files several
    times slower (7x in one run) for tens of seconds afterwards (``bench/fs_bench.py --after-delete`` shows
    it). Deleting a cold build's previous outputs right before it would charge every tool for the file
    system's clean-up of the last run, and the tools that create more files per step the most.
    """

    def __init__(self) -> None:
        self.folder: Path | None = None
        self._count = 0

    def place(self, workdir: Path) -> None:
        """Keep the trash in ``workdir`` (on the file system of everything discarded: a rename moves it)."""
        self.folder = Path(tempfile.mkdtemp(prefix=".trash-", dir=workdir))

    def discard(self, path: Path) -> None:
        if not path.exists():
            return
        if self.folder is None:
            shutil.rmtree(path)
            return
        self._count += 1
        os.rename(path, self.folder / f"{self._count}-{path.name}")

    def empty(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None


TRASH = Trash()


# -- running one process ----------------------------------------------------------------------------


@dataclass
class Sample:
    seconds: float
    peak_rss_mb: float
    exit_code: int
    cpu_seconds: float = 0.0
    """User and system CPU time of the process tree (``wait4``): what a loaded machine disturbs less than wall time."""
    timed_out: bool = False


def bench_env() -> dict[str, str]:
    """This process's environment for a measured child, with bytecode caching on: a user's shell does not set
    PYTHONDONTWRITEBYTECODE, and without ``__pycache__`` every process would compile its imports afresh."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_timed(cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path, timeout: float) -> Sample:
    """Run ``cmd`` to completion; wall time from spawn to reaped exit, its tree's peak RSS and CPU time (``wait4``)."""
    with open(log_path, "ab") as out:
        out.write(f"\n$ (cd {shlex.quote(str(cwd))} && {shlex.join(cmd)})\n".encode())
        out.flush()
        timed_out = threading.Event()
        start = time.perf_counter()
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the process group this call started, nothing else
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss / (1024 * 1024) if sys.platform == "darwin" else usage.ru_maxrss / 1024
    return Sample(
        seconds, rss, proc.returncode, timed_out=timed_out.is_set(), cpu_seconds=usage.ru_utime + usage.ru_stime
    )


def log_tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(line[:300] for line in text.strip().splitlines()[-lines:])


def error_summary(tail: str) -> str:
    """The most telling line of a failed run's output (the exception, if there is one)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", line):
            return line[:160]
    return lines[-1][:160] if lines else "failed"


# -- the peers --------------------------------------------------------------------------------------


@dataclass
class Tools:
    python: str
    marinbuild: list[str]
    ninja: str | None
    make: str | None
    marin_python: str | None
    jobs: int


_NODE = re.compile(r"^n(\d+)(?:-[0-9a-f]{6})?$")


class Peer(abc.ABC):
    """One tool on one workload folder: how to build, reset, change the mid node, and see what ran."""

    name = ""
    kind = ""

    def __init__(self, root: Path, graph: Graph, tools: Tools) -> None:
        self.root = root
        self.graph = graph
        self.tools = tools
        self.folder = root / self.kind
        self.log_path = root / "log.txt"

    def prepare(self) -> None:
        write_workload(self.root, self.graph.shape, self.graph.n, [self.kind])

    @abc.abstractmethod
    def command(self) -> tuple[list[str], Path, dict[str, str]]:
        """The command that builds the workload, its working directory and its environment."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Remove every output, so the next build is cold."""

    @abc.abstractmethod
    def change(self, salt: int) -> None:
        """Change the mid-graph node's input (``salt`` makes each change new), for an incremental build."""

    @abc.abstractmethod
    def outputs(self) -> dict[str, int]:
        """Every output file written so far, with its mtime (ns)."""

    @staticmethod
    def node_of(path: str) -> int:
        match = _NODE.match(
            os.path.basename(os.path.dirname(path)) if path.endswith("/out.txt") else os.path.basename(path)
        )
        if match is None:
            raise ValueError(f"not a node's output: {path}")
        return int(match.group(1))


class FilePeer(Peer):
    """ninja and make: ``in/n<i>`` -> ``out/n<i>``."""

    def reset(self) -> None:
        TRASH.discard(self.folder / "out")
        (self.folder / "out").mkdir()
        for state in (".ninja_log", ".ninja_deps"):
            (self.folder / state).unlink(missing_ok=True)

    def change(self, salt: int) -> None:
        touch_input(self.folder, self.graph.mid, f"{self.graph.mid} {salt}\n")

    def outputs(self) -> dict[str, int]:
        with os.scandir(self.folder / "out") as entries:
            return {e.path: e.stat().st_mtime_ns for e in entries if e.is_file()}


class NinjaPeer(FilePeer):
    name, kind = "ninja", "ninja"

    def command(self) -> tuple[list[str], Path, dict[str, str]]:
        assert self.tools.ninja
        return [self.tools.ninja, "-j", str(self.tools.jobs)], self.folder, bench_env()


class MakePeer(FilePeer):
    name, kind = "make", "make"

    def command(self) -> tuple[list[str], Path, dict[str, str]]:
        assert self.tools.make
        return [self.tools.make, "-j", str(self.tools.jobs)], self.folder, bench_env()


class PrefixPeer(Peer):
    """marinbuild and Marin: outputs are ``<prefix>/.../n<i>-<hash>/out.txt``."""

    @property
    def prefix(self) -> Path:
        return self.root / "prefix"

    def env(self, executor: str) -> dict[str, str]:
        env = bench_env()
        env[EXECUTOR_ENV] = executor
        env["MARIN_PREFIX"] = str(self.prefix)  # never ask a cloud metadata server where the prefix is
        env.pop("RAY_ADDRESS", None)
        return env

    def reset(self) -> None:
        TRASH.discard(self.prefix)

    def outputs(self) -> dict[str, int]:
        found: dict[str, int] = {}
        if not self.prefix.exists():
            return found
        for dirpath, _dirs, files in os.walk(self.prefix):
            if "out.txt" in files:
                path = os.path.join(dirpath, "out.txt")
                found[path] = os.stat(path).st_mtime_ns
        return found


class ScriptPeer(PrefixPeer):
    kind = "script"
    executor = "marinbuild"

    def python(self) -> str:
        return self.tools.python

    def command(self) -> tuple[list[str], Path, dict[str, str]]:
        return [self.python(), "workload.py", "--prefix", str(self.prefix)], self.folder, self.env(self.executor)

    def change(self, salt: int) -> None:
        set_script_salt(self.folder / "workload.py", self.graph.mid, salt)


class MarinbuildApiPeer(ScriptPeer):
    name = "marinbuild-api"


class MarinPeer(ScriptPeer):
    name = "marin"
    executor = "marin"

    def python(self) -> str:
        assert self.tools.marin_python
        return self.tools.marin_python


class MarinbuildCliPeer(PrefixPeer):
    name, kind = "marinbuild-cli", "ws"

    def command(self) -> tuple[list[str], Path, dict[str, str]]:
        return [*self.tools.marinbuild, "//...", "--prefix", str(self.prefix)], self.folder, self.env("marinbuild")

    def change(self, salt: int) -> None:
        set_build_salt(self.folder, self.graph, self.graph.mid, salt)


PEER_CLASSES: dict[str, type[Peer]] = {
    "ninja": NinjaPeer,
    "make": MakePeer,
    "marin": MarinPeer,
    "marinbuild-api": MarinbuildApiPeer,
    "marinbuild-cli": MarinbuildCliPeer,
}


# -- measuring a peer -------------------------------------------------------------------------------


@dataclass
class Options:
    runs: int
    slow: float
    timeout: float


def ran_between(peer: Peer, before: dict[str, int], after: dict[str, int]) -> tuple[int, set[int]]:
    changed = [p for p, mtime in after.items() if before.get(p) != mtime]
    return len(changed), {peer.node_of(p) for p in changed}


def measure_phase(peer: Peer, expected: set[int], opts: Options, before_each: Callable[[int], None]) -> dict[str, Any]:
    """Warm-up plus ``opts.runs`` timed runs of one phase; every run's actions are counted and checked."""
    samples: list[dict[str, Any]] = []
    problems: list[str] = []
    for k in range(1 + opts.runs):
        before_each(k)
        before = peer.outputs()
        cmd, cwd, env = peer.command()
        sample = run_timed(cmd, cwd, env, peer.log_path, opts.timeout)
        if sample.exit_code != 0 or sample.timed_out:
            tail = log_tail(peer.log_path)
            why = f"timed out after {opts.timeout:g} s" if sample.timed_out else error_summary(tail)
            return {
                "error": why,
                "exit_code": sample.exit_code,
                "log_tail": tail,
                "command": shlex.join(cmd),
                "samples": samples,
            }
        count, nodes = ran_between(peer, before, peer.outputs())
        ok = count == len(expected) and nodes == expected
        if not ok:
            extra, missing = sorted(nodes - expected), sorted(expected - nodes)
            problems.append(
                f"run {k}: {count} actions ran, expected {len(expected)}"
                + (f"; unexpected nodes {extra[:5]}" if extra else "")
                + (f"; missing nodes {missing[:5]}" if missing else "")
            )
        samples.append(
            {
                "seconds": sample.seconds,
                "cpu_seconds": sample.cpu_seconds,
                "peak_rss_mb": sample.peak_rss_mb,
                "actions": count,
                "warmup": k == 0,
                "ok": ok,
            }
        )
        if k == 0 and sample.seconds > opts.slow:
            break  # too slow to repeat: the warm-up is the one sample
    timed = [s for s in samples if not s["warmup"]] or samples
    return {
        "seconds": statistics.median(s["seconds"] for s in timed),
        "cpu_seconds": statistics.median(s["cpu_seconds"] for s in timed),
        "peak_rss_mb": max(s["peak_rss_mb"] for s in timed),
        "runs": len(timed),
        "cut_short": len(timed) < opts.runs,
        "actions": timed[-1]["actions"],
        "expected_actions": len(expected),
        "actions_ok": not problems,
        "problems": problems,
        "samples": samples,
        "command": shlex.join(cmd),
    }


def measure_peer(peer: Peer, opts: Options) -> dict[str, Any]:
    graph = peer.graph
    everything = set(range(graph.n))
    affected = graph.reverse_closure(graph.mid)
    result: dict[str, Any] = {"peer": peer.name, "shape": graph.shape, "steps": graph.n, "folder": str(peer.root)}
    salts = iter(range(1, 1_000_000))
    phases: list[tuple[str, set[int], Callable[[int], None]]] = [
        ("cold", everything, lambda _k: peer.reset()),
        ("noop", set(), lambda _k: None),
        ("incremental", affected, lambda _k: peer.change(next(salts))),
    ]
    for phase, expected, before_each in phases:
        log(f"  {peer.name} {graph.shape} x {graph.n}: {phase} ...")
        measured = measure_phase(peer, expected, opts, before_each)
        result[phase] = measured
        if "error" in measured:
            log(f"  {peer.name} {graph.shape} x {graph.n}: {phase} FAILED: {measured['error']}")
            for rest in PHASES[PHASES.index(phase) + 1 :]:
                result[rest] = {"error": f"not measured: the {phase} phase failed"}
            break
        log(
            f"  {peer.name} {graph.shape} x {graph.n}: {phase} {measured['seconds']:.3f} s "
            f"(median of {measured['runs']}), {measured['actions']} actions"
            + ("" if measured["actions_ok"] else " -- WRONG: " + "; ".join(measured["problems"]))
        )
    if isinstance(peer, MarinbuildApiPeer) and "error" not in result.get("noop", {"error": ""}):
        # The floor of any no-op through the Python API: the interpreter, the import, compiling the script and
        # making its ExecutorSteps (the user's code, which Marin runs too), with no build after it.
        cmd, cwd, env = peer.command()
        env[EXECUTOR_ENV] = "none"
        log(f"  {peer.name} {graph.shape} x {graph.n}: the script alone ...")
        result["script_only"] = median_of(cmd, cwd, env, peer.log_path, opts.runs, opts)
    return result


# -- the BUILD/CLI rows ----------------------------------------------------------------------------


def median_of(
    cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path, runs: int, opts: Options
) -> dict[str, Any]:
    samples, cpu = [], []
    for k in range(1 + runs):
        sample = run_timed(cmd, cwd, env, log_path, opts.timeout)
        if sample.exit_code != 0 or sample.timed_out:
            return {"error": error_summary(log_tail(log_path)), "command": shlex.join(cmd)}
        if k:
            samples.append(sample.seconds)
            cpu.append(sample.cpu_seconds)
    return {
        "seconds": statistics.median(samples),
        "cpu_seconds": statistics.median(cpu),
        "runs": len(samples),
        "samples": samples,
        "command": shlex.join(cmd),
    }


def query_lines(cmd: list[str], cwd: Path, env: dict[str, str]) -> int:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return len([line for line in out.stdout.splitlines() if line.strip()])


def measure_cli_rows(
    root: Path, n: int, tools: Tools, opts: Options, peers_result: list[dict[str, Any]]
) -> dict[str, Any]:
    """The BUILD/CLI issue's rows on the layered workspace of ``n`` targets in 100 packages."""
    graph = make_graph("layered", n)
    write_workload(root, "layered", n, ["ws"])
    ws = root / "ws"
    env = bench_env()
    env.pop("MARIN_PREFIX", None)
    log_path = root / "log.txt"
    mid = graph.label_of(graph.mid)
    rows: dict[str, Any] = {"steps": n, "packages": len({graph.package_of(i) for i in range(n)}), "mid": mid}
    log(f"  BUILD/CLI rows, {n} targets: --help, query, loader ...")
    rows["help"] = median_of([*tools.marinbuild, "--help"], ws, env, log_path, max(opts.runs, 5), opts)
    queries = {
        "query_all": ("//...", n),
        "query_deps": ("deps(//...)", n),
        "query_rdeps": (f"rdeps(//..., {mid})", graph.expected_incremental),
    }
    for key, (expr, want) in queries.items():
        cmd = [*tools.marinbuild, "query", expr, "--output", "label"]
        rows[key] = median_of(cmd, ws, env, log_path, opts.runs, opts)
        rows[key]["expression"] = expr
        if "error" not in rows[key]:
            got = query_lines(cmd, ws, env)
            rows[key]["results"] = got
            rows[key]["expected_results"] = want
            rows[key]["ok"] = got == want
    for mode in ("cold",):
        samples = []
        for k in range(1 + opts.runs):
            out = subprocess.run(
                [tools.python, "-c", LOADER_SNIPPET, str(ws), mode], cwd=ws, env=env, capture_output=True, text=True
            )
            if out.returncode != 0:
                samples = []
                rows[f"loader_{mode}"] = {"error": error_summary(out.stderr)}
                break
            if k:
                samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
        if samples:
            seconds = statistics.median(s["seconds"] for s in samples)
            rows[f"loader_{mode}"] = {
                "seconds": seconds,
                "targets": samples[-1]["targets"],
                "runs": len(samples),
                "samples": [s["seconds"] for s in samples],
                "targets_per_s": samples[-1]["targets"] / seconds,
            }
    cli = next(
        (r for r in peers_result if r["peer"] == "marinbuild-cli" and r["shape"] == "layered" and r["steps"] == n), None
    )
    if cli is not None and "seconds" in cli.get("noop", {}):
        rows["noop_build"] = dict(cli["noop"], source="the marinbuild CLI peer's layered no-op row")
    else:
        peer = MarinbuildCliPeer(root, graph, tools)
        cold = run_timed(peer.command()[0], ws, peer.env("marinbuild"), log_path, opts.timeout)
        if cold.exit_code != 0:
            rows["noop_build"] = {"error": "the cold build failed: " + error_summary(log_tail(log_path))}
        else:
            cmd, cwd, penv = peer.command()
            rows["noop_build"] = median_of(cmd, cwd, penv, log_path, opts.runs, opts)
    return rows


# -- environment ------------------------------------------------------------------------------------


def nproc() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def total_memory_gb() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def tool_version(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip().splitlines()
    return text[0] if text else None


def marinbuild_python() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def marinbuild_cli(python: str) -> list[str]:
    script = Path(python).parent / "marinbuild"
    return [str(script)] if script.exists() else [python, "-m", "marinbuild"]


def ensure_ninja() -> str | None:
    found = shutil.which("ninja")
    if found or not shutil.which("apt-get"):
        return found
    log("ninja not found: apt-get install -y ninja-build")
    subprocess.run(["apt-get", "install", "-y", "ninja-build"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return shutil.which("ninja")


def ensure_marin() -> tuple[str | None, str]:
    """Marin's executor in its own virtualenv (installed on first use): (its python, version) or (None, why not)."""
    python = MARIN_VENV / "bin" / "python"
    probe = "import importlib.metadata as m, marin.execution; print(m.version('marin-core'))"

    def check() -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), "-c", probe], capture_output=True, text=True, cwd=tempfile.gettempdir())

    if python.exists():
        out = check()
        if out.returncode == 0:
            return str(python), out.stdout.strip()
    log(f"installing Marin's executor (PyPI marin-core, large: ~2 GB, minutes) into {MARIN_VENV} ...")
    MARIN_VENV.parent.mkdir(parents=True, exist_ok=True)
    ignore = MARIN_VENV.parent / ".gitignore"
    if not ignore.exists():  # ~2 GB that must never be committed, whatever the repository's .gitignore says
        ignore.write_text("# Peers installed by bench/run.py (Marin's executor, ~2 GB): never committed.\n*\n")
    if not python.exists():
        made = subprocess.run([sys.executable, "-m", "venv", str(MARIN_VENV)], capture_output=True, text=True)
        if made.returncode != 0:
            return None, f"could not create {MARIN_VENV}: {made.stderr.strip()[-300:]}"
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", *MARIN_PACKAGES], capture_output=True, text=True
    )
    if pip.returncode != 0:
        lines = [line for line in pip.stderr.splitlines() if not line.startswith("WARNING")]
        return None, f"pip install {' '.join(MARIN_PACKAGES)} failed: {' '.join(lines[-3:])[:400]}"
    out = check()
    if out.returncode != 0:
        return None, f"marin.execution does not import: {error_summary(out.stderr)}"
    return str(python), out.stdout.strip()


# -- formatting -------------------------------------------------------------------------------------


def markdown_table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    spec = align or "l" * len(header)
    rule = ["---:" if a == "r" else "---" for a in spec]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def secs(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "n/a"
    r = a / b
    return f"{r:.2f}x" if r < 10 else f"{r:,.0f}x"


def phase_cell(phase: dict[str, Any] | None, key: str = "seconds") -> str:
    if phase is None:
        return "-"
    if "error" in phase:
        return short_error(phase["error"])
    value = phase.get(key)
    if value is None:
        return "n/a"
    text = secs(value) if key == "seconds" else f"{value:.0f}"
    if phase.get("cut_short") and key == "seconds":
        text += " (1 run)"
    if not phase.get("actions_ok", True):
        text += " (WRONG actions)"
    return text


def short_error(error: str) -> str:
    """A table cell for a failed phase (the whole message is under "Problems" and in the JSON)."""
    if error.startswith("not measured"):
        return "not run"
    if error.startswith("timed out"):
        return "timed out"
    match = re.match(r"^([A-Za-z_.]*(?:Error|Exception))\b", error)
    return f"failed ({match.group(1)})" if match else "failed"


def seconds_of(phase: dict[str, Any] | None) -> float | None:
    if not phase or "error" in phase:
        return None
    return phase.get("seconds")


@dataclass
class Report:
    raw: dict[str, Any]
    peers: list[str]
    lines: list[str] = field(default_factory=list)

    def out(self, text: str = "") -> None:
        self.lines.append(text)
        print(text, flush=True)


def find(raw: dict[str, Any], peer: str, shape: str, n: int) -> dict[str, Any] | None:
    return next((r for r in raw["rows"] if r["peer"] == peer and r["shape"] == shape and r["steps"] == n), None)


def print_tables(report: Report, shapes: list[str], sizes: list[int]) -> None:
    raw, peers = report.raw, report.peers
    shown = [p for p in PEERS if p in peers]
    ours = [p for p in MARINBUILD_PEERS if p in peers]
    have_ninja = "ninja" in peers
    have_marin = "marin" in peers and raw.get("marin", {}).get("python")
    header = ["shape", "steps", "phase", "actions"] + [PEER_TITLES[p] for p in shown]
    if have_ninja:
        header += [f"{PEER_TITLES[p]} / ninja" for p in ours]
    if have_marin:
        header += [f"Marin / {PEER_TITLES[p]}" for p in ours]
    rows, rss_rows = [], []
    for n in sizes:
        for shape in shapes:
            for phase in PHASES:
                cells = {p: (find(raw, p, shape, n) or {}).get(phase) for p in shown}
                expected = next((c["expected_actions"] for c in cells.values() if c and "expected_actions" in c), None)
                wrong = [PEER_TITLES[p] for p, c in cells.items() if c and not c.get("actions_ok", True)]
                actions = (
                    "n/a"
                    if expected is None
                    else f"{expected:,}" + (" (WRONG: " + ", ".join(wrong) + ")" if wrong else " ok")
                )
                row = [shape, f"{n:,}", phase, actions] + [phase_cell(cells[p]) for p in shown]
                if have_ninja:
                    row += [ratio(seconds_of(cells[p]), seconds_of(cells["ninja"])) for p in ours]
                if have_marin:
                    row += [ratio(seconds_of(cells["marin"]), seconds_of(cells[p])) for p in ours]
                rows.append(row)
                rss_rows.append([shape, f"{n:,}", phase] + [phase_cell(cells[p], "peak_rss_mb") for p in shown])
    report.out("## Whole-process wall time, seconds (median of the runs after a warm-up)\n")
    report.out(
        "`actions`: the actions each phase must run (cold: all; no-op: none; incremental: the mid node and "
        "its reverse dependencies); `ok` means every peer ran exactly those nodes in every run. "
        "`X / ninja`: time relative to ninja (lower is better); `Marin / X`: how many times faster than "
        "Marin.\n"
    )
    report.out(markdown_table(header, rows, "lllr" + "r" * (len(header) - 4)))
    script_rows = []
    for n in sizes:
        for shape in shapes:
            script = (find(raw, "marinbuild-api", shape, n) or {}).get("script_only")
            api_noop = seconds_of((find(raw, "marinbuild-api", shape, n) or {}).get("noop"))
            ninja_noop = seconds_of((find(raw, "ninja", shape, n) or {}).get("noop"))
            if script is not None:
                script_rows.append(
                    [
                        shape,
                        f"{n:,}",
                        phase_cell(script),
                        ratio(seconds_of(script), api_noop),
                        ratio(seconds_of(script), ninja_noop),
                    ]
                )
    if script_rows:
        report.out(
            "\nThe Python API's floor: the workload script alone (interpreter, `import marinbuild.executor`, "
            "compiling the script, making its `ExecutorStep`s) with no build after it "
            "(`MARINBUILD_BENCH_EXECUTOR=none`). Every no-op through the API pays this first.\n"
        )
        report.out(
            markdown_table(["shape", "steps", "script alone", "/ API no-op", "/ ninja no-op"], script_rows, "llrrr")
        )
    report.out("\n## Peak RSS, MB (largest process of the tree, largest over the runs)\n")
    report.out(
        markdown_table(
            ["shape", "steps", "phase"] + [PEER_TITLES[p] for p in shown], rss_rows, "lll" + "r" * len(shown)
        )
    )


def print_cli_rows(report: Report) -> None:
    cli_rows = report.raw.get("cli_rows") or []
    if not cli_rows:
        return
    report.out("\n## BUILD.marin and CLI: layered workspaces in 100 packages (whole processes unless noted)\n")
    rows = []
    for r in cli_rows:
        n = r["steps"]
        ws = f"{n:,} targets"

        def add(
            what: str, m: dict[str, Any], per_target: bool = False, check: str = "", n: int = n, ws: str = ws
        ) -> None:
            if "error" in m:
                rows.append([ws, what, short_error(m["error"]), "", check])
                return
            tps = f"{n / m['seconds']:,.0f}" if per_target else ""
            rows.append([ws, what, secs(m["seconds"]), tps, check])

        add("`marinbuild --help`", r["help"])
        add("load: `marinbuild query //... --output label`", r["query_all"], True, _query_check(r["query_all"]))
        if "loader_cold" in r:
            add("load, fresh process: `Loader.load_all()`", r["loader_cold"], True)
        add("query: `deps(//...)`", r["query_deps"], False, _query_check(r["query_deps"]))
        add(f"query: `rdeps(//..., {r['mid']})`", r["query_rdeps"], False, _query_check(r["query_rdeps"]))
        add("no-op build: `marinbuild //...`", r["noop_build"])
    report.out(markdown_table(["workspace", "what", "seconds", "targets/s", "check"], rows, "llrrl"))


def _query_check(m: dict[str, Any]) -> str:
    if "results" not in m:
        return ""
    return f"{m['results']:,} results" + (" ok" if m["ok"] else f" (WRONG: expected {m['expected_results']:,})")


def compute_bars(raw: dict[str, Any], peers: list[str], shapes: list[str], sizes: list[int]) -> list[dict[str, str]]:
    """Issue 33's guards for the CLI (docs/performance.md, "The guards"): wall time of whole processes, with
    their CPU time beside it (what a loaded machine disturbs less), and peak memory."""
    bars: list[dict[str, str]] = []

    def bar(
        name: str, phase: dict[str, Any] | None, limit_s: float | None, limit: str, mb: float | None = None
    ) -> None:
        if not phase or "error" in phase:
            bars.append({"bar": name, "measured": "n/a", "limit": limit, "result": "not measured"})
            return
        t, cpu, rss = phase["seconds"], phase.get("cpu_seconds", 0.0), phase.get("peak_rss_mb", 0.0)
        ok = (limit_s is None or t <= limit_s) and (mb is None or rss <= mb)
        measured = f"{t:.3f} s (CPU {cpu:.3f} s), {rss:.0f} MB"
        bars.append({"bar": name, "measured": measured, "limit": limit, "result": "PASS" if ok else "FAIL"})

    if "marinbuild-cli" in peers:
        for shape, n in (("roll", 100), ("sweep", 1000)):  # the realistic shapes
            row = find(raw, "marinbuild-cli", shape, n)
            if row is None:
                continue
            bar(
                f"CLI no-op, {shape} x {n:,}",
                row.get("noop"),
                BAR_REALISTIC_NOOP_S,
                f"<= {BAR_REALISTIC_NOOP_S:g} s",
            )
            steps = seconds_of((find(raw, "ninja", shape, n) or {}).get("incremental"))
            limit_s = None if steps is None else BAR_REALISTIC_EDIT_S + steps
            bar(
                f"CLI rebuild after an edit, {shape} x {n:,}",
                row.get("incremental") if limit_s is not None else None,
                limit_s,
                f"<= {BAR_REALISTIC_EDIT_S:g} s + the steps' own time (ninja's rebuild of the same steps)",
            )
        row = find(raw, "marinbuild-cli", "layered", 10000)
        if row is not None:
            bar(
                "CLI no-op, layered x 10,000",
                row.get("noop"),
                BAR_10K_NOOP_S,
                f"<= {BAR_10K_NOOP_S:g} s, <= {BAR_10K_MB:g} MB",
                BAR_10K_MB,
            )
            bar(
                "CLI 98-step rebuild, layered x 10,000",
                row.get("incremental"),
                BAR_10K_EDIT_S,
                f"<= {BAR_10K_EDIT_S:g} s, <= {BAR_10K_MB:g} MB",
                BAR_10K_MB,
            )
        row = find(raw, "marinbuild-cli", "layered", 100000)
        if row is not None:
            for phase in ("cold", "noop", "incremental"):
                bar(
                    f"CLI {phase}, layered x 100,000",
                    row.get(phase),
                    None,
                    f"finishes, <= {BAR_100K_MB:g} MB",
                    BAR_100K_MB,
                )
    helps = [r["help"]["seconds"] for r in raw.get("cli_rows") or [] if "seconds" in r.get("help", {})]
    if helps:
        h = statistics.median(helps)
        ok = "PASS" if h < BAR_HELP_S else "FAIL"
        bars.append(
            {"bar": "`marinbuild --help`", "measured": f"{h:.3f} s", "limit": f"under {BAR_HELP_S:g} s", "result": ok}
        )
    return bars


# -- the GCS and Ray benchmarks of other issues -----------------------------------------------------


def run_other_bench(name: str, title: str, python: str, timeout: float) -> dict[str, Any]:
    """Run ``bench/<name>.py`` (with ``--json`` if it takes it); its stdout becomes a section of the report."""
    script = BENCH / f"{name}.py"
    lines = [f"\n## {title} (`bench/{name}.py`)\n"]
    entry: dict[str, Any] = {}
    if not script.exists():
        lines.append(f"Not measured: `bench/{name}.py` does not exist in this checkout.")
        return dict(entry, error="missing", markdown="\n".join(lines))
    help_text = subprocess.run([python, str(script), "--help"], cwd=REPO, capture_output=True, text=True).stdout
    cmd = [python, str(script)]
    json_path = None
    if "--json" in help_text:
        json_path = Path(tempfile.mkdtemp(prefix=f"{name}-")) / "out.json"
        cmd += ["--json", str(json_path)]
    entry["command"] = cmd
    log(f"running {shlex.join(cmd)} ...")
    try:
        out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        lines.append(f"Not measured: `{shlex.join(cmd)}` did not finish within {timeout:g} s.")
        return dict(entry, error="timeout", markdown="\n".join(lines))
    entry.update(exit_code=out.returncode, stdout=out.stdout)
    if out.returncode != 0:
        lines.append(f"`{shlex.join(cmd)}` failed (exit {out.returncode}): {error_summary(out.stderr)}")
        entry["stderr_tail"] = out.stderr[-2000:]
    text = re.sub(r"^# .*\n+", "", out.stdout.strip())  # its own title: ours is above
    if text:
        lines.append(text)
    if json_path is not None and json_path.exists():
        try:
            entry["json"] = json.loads(json_path.read_text())
        except ValueError:
            pass
    entry["markdown"] = "\n".join(lines)
    return entry


def render_header(report: Report) -> None:
    raw = report.raw
    mem = raw.get("memory_gb")
    report.out("# marinbuild beside ninja, make and Marin's executor\n")
    report.out(f"- date: {raw['date']}")
    memory = f", {mem:.1f} GB memory" if mem else ""
    report.out(f"- machine: {raw['nproc']} cores ({raw['cpu']}){memory}, {raw['platform']}")
    load1, load5, _ = raw["load_average_start"]
    report.out(f"- load average at the start: {load1:.2f} (1 min), {load5:.2f} (5 min)")
    versions = ", ".join(f"{k} {v}" for k, v in raw["tools"].items() if v)
    report.out(f"- tools: {versions}; ninja and make run with -j {raw['jobs_for_ninja_and_make']}")
    report.out(f"- command: `{shlex.join(raw['command'])}`")
    runs = raw["runs"]
    report.out(
        f"- every phase: 1 warm-up, then the median of {runs} run{'s' if runs > 1 else ''}; "
        f"a phase whose warm-up takes over {raw['slow']:g} s is measured once (marked '1 run')"
    )
    for peer, why in raw["unavailable"].items():
        report.out(f"- **{PEER_TITLES[peer]}: not measured**: {why}")
    report.out()


def render_results(report: Report) -> None:
    raw = report.raw
    print_tables(report, raw["shapes"], raw["sizes"])
    print_cli_rows(report)
    report.out("\n## Bars\n")
    report.out(
        markdown_table(
            ["bar", "measured", "limit", "result"],
            [[b["bar"], b["measured"], b["limit"], b["result"]] for b in raw["bars"]],
        )
    )
    problems = []
    for r in raw["rows"]:
        for phase in PHASES:
            m = r.get(phase) or {}
            if "error" in m and not m["error"].startswith("not measured"):
                problems.append(f"{PEER_TITLES[r['peer']]}, {r['shape']} x {r['steps']:,}, {phase}: {m['error']}")
            for p in m.get("problems", []):
                problems.append(f"{PEER_TITLES[r['peer']]}, {r['shape']} x {r['steps']:,}, {phase}: {p}")
    if problems or raw["unavailable"]:
        report.out("\n## Problems\n")
        for peer, why in raw["unavailable"].items():
            report.out(f"- {PEER_TITLES[peer]} not measured: {why}")
        for p in problems:
            report.out(f"- {p}")


def render_footer(report: Report) -> None:
    load1, load5, _ = report.raw["load_average_end"]
    report.out(
        f"\nLoad average at the end: {load1:.2f} (1 min), {load5:.2f} (5 min). "
        f"Other work on the machine shows up in these numbers."
    )


def render(path: Path, doc: Path | None = None) -> None:
    """Print the markdown of an earlier run from its raw JSON (``--render``); with ``doc``, write its tables there."""
    raw = json.loads(path.read_text())
    report = Report(raw, raw["peers"])
    render_header(report)
    raw["bars"] = compute_bars(raw, raw["peers"], raw["shapes"], raw["sizes"])
    render_results(report)
    for name in ("gcs_bench", "ray_bench"):
        if name in raw and "markdown" in raw[name]:
            report.out(raw[name]["markdown"])
    render_footer(report)
    if doc is not None:
        write_doc(doc, raw)


DOC_FLAGS = {"--json": 1, "--workdir": 1, "--keep": 0, "--doc": 1, "--render": 1}
"""Flags left out of the command a doc table quotes: where the files went, not what was measured."""


def doc_marker(raw: dict[str, Any]) -> str:
    """The name of a run's section in the doc: its shapes and sizes (``run.py layered 10000``)."""
    return "run.py " + " ".join(raw["shapes"]) + " " + " ".join(str(n) for n in raw["sizes"])


def doc_text(raw: dict[str, Any]) -> str:
    """A run's tables for docs/performance.md: the command, the times with the ratios, the peak RSS, the CLI rows.
    No date and no load average (the doc's rule); the machine is the doc's reference machine."""
    args = raw["command"][2:]
    kept: list[str] = []
    skip = 0
    for arg in args:
        if skip:
            skip -= 1
            continue
        if arg in DOC_FLAGS:
            skip = DOC_FLAGS[arg]
            continue
        kept.append(arg)
    report = Report(raw, raw["peers"])
    report.lines.append(f"`.venv/bin/python bench/run.py {shlex.join(kept)}` (whole processes, seconds):\n")
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        print_tables(report, raw["shapes"], raw["sizes"])
        print_cli_rows(report)
    return re.sub(r"^## (.*)$", r"\1:", "\n".join(report.lines), flags=re.MULTILINE)  # the doc has its headings


def write_doc(path: Path, raw: dict[str, Any]) -> None:
    """Put the run's tables between ``<!-- NAME -->`` and ``<!-- /NAME -->`` in ``path`` (``doc_marker``); the
    markers are added at the end of the file the first time."""
    name = doc_marker(raw)
    start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    text = path.read_text()
    block = f"{start}\n{doc_text(raw)}\n{end}"
    if start in text and end in text:
        before, rest = text.split(start, 1)
        text = before + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
    log(f"tables written into {path} ({start})")


# -- main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See bench/README.md for what each row means."
    )
    parser.add_argument(
        "--peers",
        nargs="+",
        choices=PEERS,
        default=list(DEFAULT_PEERS),
        help="tools to compare (marin is opt-in: it installs ~2 GB into bench/.peers/marin)",
    )
    parser.add_argument("--shapes", nargs="+", choices=SHAPES, default=list(SHAPES))
    parser.add_argument("--sizes", nargs="+", type=int, default=[100, 1000], help="steps per graph (e.g. 1000 10000)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per phase, after one warm-up (default 3)")
    parser.add_argument(
        "--slow",
        type=float,
        default=30.0,
        help="a phase whose warm-up takes longer than this many seconds is measured once",
    )
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before one build process is killed")
    parser.add_argument("--json", metavar="FILE", help="raw numbers (default bench/out/run-<time>.json)")
    parser.add_argument("--workdir", help="where the workloads go (default: a new folder under the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the workloads, outputs and logs")
    parser.add_argument("--gcs", action="store_true", help="also run bench/gcs_bench.py (GCS no-op)")
    parser.add_argument("--ray", action="store_true", help="also run bench/ray_bench.py (Ray overhead)")
    parser.add_argument("--render", metavar="JSON", help="only print the tables of an earlier run's raw JSON")
    parser.add_argument(
        "--doc",
        metavar="FILE",
        type=Path,
        help="also write the tables into this markdown file (docs/performance.md), between markers "
        "naming the shapes and sizes",
    )
    args = parser.parse_args(argv)
    if args.render:
        render(Path(args.render), args.doc)
        return 0
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if any(n < 10 for n in args.sizes):
        parser.error("--sizes must be at least 10")
    peers = [p for p in PEERS if p in args.peers]
    opts = Options(runs=args.runs, slow=args.slow, timeout=args.timeout)
    started = datetime.now().astimezone()
    command = [sys.executable, *sys.argv] if argv is None else [sys.executable, str(Path(__file__)), *argv]

    python = marinbuild_python()
    tools = Tools(
        python=python,
        marinbuild=marinbuild_cli(python),
        ninja=None,
        make=shutil.which("make"),
        marin_python=None,
        jobs=nproc() + 2,
    )
    raw: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "command": command,
        "nproc": nproc(),
        "memory_gb": total_memory_gb(),
        "cpu": cpu_model(),
        "platform": platform.platform(),
        "load_average_start": os.getloadavg(),
        "peers": peers,
        "shapes": args.shapes,
        "sizes": args.sizes,
        "runs": args.runs,
        "slow": args.slow,
        "jobs_for_ninja_and_make": tools.jobs,
        "rows": [],
        "tools": {},
    }
    unavailable: dict[str, str] = {}
    if "ninja" in peers:
        tools.ninja = ensure_ninja()
        if tools.ninja is None:
            unavailable["ninja"] = "ninja is not installed (apt-get install ninja-build)"
    if "make" in peers and tools.make is None:
        unavailable["make"] = "make is not installed"
    if "marin" in peers:
        marin_python, marin_version = ensure_marin()
        tools.marin_python = marin_python
        raw["marin"] = {"python": marin_python, "version": marin_version if marin_python else None}
        if marin_python is None:
            unavailable["marin"] = marin_version
    raw["tools"] = {
        "python": (tool_version([python, "--version"]) or "").replace("Python ", "") or None,
        "marinbuild": (tool_version([*tools.marinbuild, "--version"]) or "").replace("marinbuild, version ", "")
        or None,
        "ninja": tool_version([tools.ninja, "--version"]) if tools.ninja else None,
        "make": tool_version([tools.make, "--version"]) if tools.make else None,
        "marin-core": (raw.get("marin") or {}).get("version"),
    }
    raw["unavailable"] = unavailable

    report = Report(raw, peers)
    render_header(report)

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="marinbuild-run-"))
    workdir.mkdir(parents=True, exist_ok=True)
    log(f"workloads under {workdir}")
    TRASH.place(workdir)
    runnable = [p for p in peers if p not in unavailable]
    try:
        for n in args.sizes:
            for shape in args.shapes:
                graph = make_graph(shape, n)
                for name in runnable:
                    root = workdir / f"{shape}-{n}" / name
                    peer = PEER_CLASSES[name](root, graph, tools)
                    peer.prepare()
                    row = measure_peer(peer, opts)
                    raw["rows"].append(row)
                    if not args.keep:
                        TRASH.discard(root)
        if "marinbuild-cli" in runnable:
            raw["cli_rows"] = [measure_cli_rows(workdir / f"cli-{n}", n, tools, opts, raw["rows"]) for n in args.sizes]
    finally:
        TRASH.empty()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    raw["bars"] = compute_bars(raw, peers, args.shapes, args.sizes)
    render_results(report)
    for name, title, wanted in (("gcs_bench", "GCS no-op", args.gcs), ("ray_bench", "Ray overhead", args.ray)):
        if wanted:
            raw[name] = run_other_bench(name, title, python, args.timeout)
            report.out(raw[name]["markdown"])

    raw["load_average_end"] = os.getloadavg()
    render_footer(report)
    raw["markdown"] = "\n".join(report.lines)
    json_path = Path(args.json) if args.json else BENCH / "out" / f"run-{started.strftime('%Y%m%d-%H%M%S')}.json"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(raw, indent=2, default=str))
    json_path.with_suffix(".md").write_text(raw["markdown"] + "\n")
    log(f"raw numbers written to {json_path}, the tables to {json_path.with_suffix('.md')}")
    if args.doc is not None:
        write_doc(args.doc, raw)
    return 0


if __name__ == "__main__":
    sys.exit(main())
