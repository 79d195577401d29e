"""Compute recorded beside each output, reported by builds, and ``cache stats`` over the recorded runs (real CLI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from test_cache import marinbuild_cli

from marinbuild.run.compute import PREFIX, hours_named, number
from marinbuild.store import fs

STEPS = """
import fsspec


def write(config):
    with fsspec.open(config["output_path"] + "/out.txt", "w", auto_mkdir=True) as f:  # a folder or a gs:// prefix
        f.write("x" * config["size"])
"""
BUILD = """
load("@marinbuild//rules:python.py", "python_step")
python_step(name = "a", fn = "compute_steps:write", config = {"size": 100})
python_step(name = "b", fn = "compute_steps:write", config = {"size": 1000}, deps = [":a"], resources = {"cpu": 3})
"""


def workspace(root: Path, prefix: str) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.marinbuild]\nprefix = '{prefix}'\n")
    (root / "compute_steps.py").write_text(textwrap.dedent(STEPS))
    (root / "pkg" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    return root


def check_compute_and_stats(root: Path, listdir: Callable[[str], list[str]]) -> None:
    """Build //pkg:a, then //pkg:b (reusing a): each step's record and each build's words; no-ops after a's record
    is removed reuse a step of unknown compute; ``cache stats`` sums the four recorded runs."""

    def record(output_path: str) -> tuple[str, dict]:
        (name,) = [n for n in listdir(output_path) if n.startswith(PREFIX)]
        return f"{output_path}/{name}", json.loads(fs.read_bytes(f"{output_path}/{name}") or b"")

    built = json.loads(marinbuild_cli(root, "build", "//pkg:a", "--output", "json").stdout)
    (a_path,) = [t["output_path"] for t in built["targets"]]
    a_file, a = record(a_path)
    assert hours_named(a_file.rpartition("/")[2]) == a["hours"]  # what a build reuses is read from the name
    assert (a["backend"], a["cpus"], a["gpus"], a["tpu"], a["attempts"], a["preemptions"]) == (
        "local",
        1,
        0,
        None,
        1,
        0,
    )
    assert a["wall_seconds"] > 0 and a["hours"] == {"CPU-hours": round(a["wall_seconds"] / 3600, 9)}
    assert built["compute"]["spent"] == {"steps": 1, "unknown": 0, "hours": a["hours"]}

    out = marinbuild_cli(root, "build", "//pkg:b").stdout
    b_path = out.split("->")[-1].strip()
    b = record(b_path)[1]
    assert b["cpus"] == 3 and b["hours"]["CPU-hours"] == round(3 * b["wall_seconds"] / 3600, 9)
    reused, spent = number(a["hours"]["CPU-hours"]), number(b["hours"]["CPU-hours"])
    headline = out.splitlines()[0]
    assert headline.endswith(f"; reused 1 step worth {reused} CPU-hours; spent 1 step worth {spent} CPU-hours"), out
    logs = sorted((root / ".marinbuild" / "events").glob("*.jsonl"))
    event = json.loads(logs[-1].read_text().splitlines()[-1])
    assert event["kind"] == "compute" and headline.endswith(event["detail"])
    assert event["data"]["steps"] == {
        "pkg/a": {"how": "reused", "hours": a["hours"]},
        "pkg/b": {"how": "ran", "hours": b["hours"]},
    }

    fs.remove(a_file)  # as Marin (or a marinbuild before records) leaves an output
    noop = json.loads(marinbuild_cli(root, "build", "//pkg:a", "--output", "json").stdout)
    assert noop["compute"]["reused"] == {"steps": 1, "unknown": 1, "hours": {}}
    assert "reused 1 step worth unknown (no record)" in marinbuild_cli(root, "build", "//pkg:a").stdout

    stats = json.loads(marinbuild_cli(root, "cache", "stats", "--output", "json").stdout)
    assert stats["runs"] == 4
    rows = {r["name"]: r for r in stats["targets"]}
    assert (rows["//pkg:a"]["hits"], rows["//pkg:a"]["misses"], rows["//pkg:a"]["hit_rate"]) == (3, 1, 0.75)
    assert rows["//pkg:a"]["reused"] == {"steps": 3, "unknown": 2, "hours": a["hours"]}
    assert rows["//pkg:a"]["spent"] == {"steps": 1, "unknown": 0, "hours": a["hours"]}
    assert (rows["//pkg:b"]["hits"], rows["//pkg:b"]["misses"], rows["//pkg:b"]["spent"]["hours"]) == (0, 1, b["hours"])
    assert rows["//pkg:b"]["versions"] == 1 and rows["//pkg:b"]["bytes"] > 1000
    assert rows["//pkg:a"]["oldest"] == rows["//pkg:a"]["newest"] <= rows["//pkg:b"]["newest"]
    (rule,) = stats["rules"]
    assert (rule["name"], rule["hits"], rule["misses"], rule["versions"]) == ("python_step", 3, 2, 2)
    assert rule["bytes"] == rows["//pkg:a"]["bytes"] + rows["//pkg:b"]["bytes"]
    text = marinbuild_cli(root, "cache", "stats", "//pkg:a").stdout
    assert "over 4 recorded runs" in text and "75%" in text and "(+ 2 steps unknown)" in text


def test_compute_is_recorded_reported_and_summed_by_cache_stats(tmp_path):
    check_compute_and_stats(workspace(tmp_path / "ws", str(tmp_path / "prefix")), os.listdir)


def test_cache_stats_mistakes_exit_2_with_one_line(tmp_path):
    root = workspace(tmp_path / "ws", str(tmp_path / "prefix"))
    for args, says in (
        (["//nope:x"], "no such package 'nope'"),
        (["--output", "yaml"], "'yaml' is not one of 'text', 'json'"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "marinbuild", "cache", "stats", *args], cwd=root, capture_output=True, text=True
        )
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and says in done.stderr, done.stderr


def test_a_local_build_reads_its_compute_without_a_storage_client(tmp_path: Path) -> None:
    """Reading the hours of a local build's outputs imports no gcsfs (nor Ray, JAX, levanter): it is for gs:// only."""
    ws = workspace(tmp_path / "ws", "out")
    probe = (
        "import atexit, runpy, sys\n"
        "heavy = ('gcsfs', 'ray', 'jax', 'levanter')\n"
        "atexit.register(lambda: print('heavy:', sorted(m for m in heavy if m in sys.modules)))\n"
        "sys.argv = ['marinbuild', '//pkg:all']\n"
        "runpy.run_module('marinbuild', run_name='__main__')\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ws), *sys.path])}
    for _ in range(2):  # the build, then a no-op that reuses both steps
        done = subprocess.run([sys.executable, "-c", probe], cwd=ws, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "heavy: []" in done.stdout, done.stdout[-500:]
    assert "reused 2 steps" in done.stderr + done.stdout
