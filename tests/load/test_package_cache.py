"""The package cache (``marinbuild.load.package_cache``) through the real CLI in child processes.

An incremental build restores the packages whose inputs did not change: what it plans must be
exactly what a cold load and analysis plans (the same command with the cache removed), after
edits of every kind of input; a package whose BUILD file did not change (by its signature) is not
evaluated again; a crash while entries are written never leaves one that is used wrongly.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from workspaces import write_workspace

STEPS = """
def write(config):
    pass
"""

RULES = """
import os

from marinbuild.load import attr, rule

MODE = os.environ.get("MB_MODE", "m0")


def _impl(ctx):
    return None


tagged = rule(
    implementation=_impl,
    attrs={"deps": attr.label_list(), "tag": attr.string(default=MODE), "n": attr.int(default=0)},
)
"""

PACKAGES = 6
"""Packages p0..p5: p2 loads lib/a.star (which loads lib/b.star), p3 uses the rules module, p4 globs data/."""


def _build_file(package: int, values: dict[str, int]) -> str:
    lines = ['load("@marinbuild//rules:python.py", "python_step")']
    if package == 2:
        lines.append('load("//lib:a.star", "A", "chained")')
    if package == 3:
        lines.append('load("//rules:r.py", "tagged")')
    for name, value in values.items():
        deps = f'["//p{package - 1}:t0"]' if package else "[]"
        lines.append(f'python_step(name = "{name}", fn = "steps:write", config = {{"v": {value}}}, deps = {deps})')
    if package == 2:
        lines.append('chained(name = "c", text = A)')
    if package == 3:
        lines.append('tagged(name = "r", deps = [":t0"])')
    if package == 4:
        lines.append('python_step(name = "g", fn = "steps:write", srcs = glob(["data/*.txt"]))')
    return "\n".join(lines) + "\n"


A_STAR = """
load("@marinbuild//rules:python.py", "python_step")
load("//lib:b.star", "B")

A = B + "-a"

def chained(name, text):
    python_step(name = name, fn = "steps:write", config = {"text": text})
"""


class Workspace:
    """A workspace of ``PACKAGES`` packages, edited in place; every edit gets an mtime of its own, in the past."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.values = [{"t0": p, "t1": 10 + p} for p in range(PACKAGES)]
        self.b = 0
        self.default = 0
        self.data = 1
        self.env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MB_MODE")}
        files = {f"p{p}/BUILD.marin": _build_file(p, self.values[p]) for p in range(PACKAGES)}
        files |= {"steps.py": STEPS, "rules/r.py": RULES, "lib/a.star": A_STAR, "lib/b.star": 'B = "b0"\n'}
        files["p4/data/d0.txt"] = "d0\n"
        write_workspace(root, files)
        self.clock = time.time() - 1000
        self.settle()

    def settle(self) -> None:
        """Give every path changed since the last call a new mtime 100+ seconds old (trusted by the racy rule)."""
        self.clock += 1
        recent = time.time() - 50
        for folder, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if d not in (".marinbuild", "out", "__pycache__")]
            for path in [folder, *(os.path.join(folder, f) for f in files)]:
                if os.stat(path).st_mtime > recent:
                    os.utime(path, (self.clock, self.clock))

    def write_package(self, p: int) -> None:
        (self.root / f"p{p}/BUILD.marin").write_text(_build_file(p, self.values[p]))

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [sys.executable, "-m", "marinbuild", *args],
            cwd=self.root,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check:
            assert result.returncode == 0, result.stderr
        return result

    def plan(self) -> dict[str, object]:
        """``build -n --output json //...``: every target's output path (so its version) and the plan."""
        return json.loads(self.run("build", "-n", "--output", "json", "//...").stdout)

    def drop_cache(self) -> None:
        shutil.rmtree(self.root / ".marinbuild", ignore_errors=True)

    def entries(self) -> list[Path]:
        return sorted(p for p in (self.root / ".marinbuild" / "packages").glob("*.bin") if p.name != "header.bin")


def _edits(ws: Workspace) -> list[tuple[str, Callable[[random.Random], None]]]:
    def attribute(rng: random.Random) -> None:
        p = rng.randrange(PACKAGES)
        name = rng.choice(list(ws.values[p]))
        ws.values[p][name] += 100
        ws.write_package(p)

    def add_target(rng: random.Random) -> None:
        p = rng.randrange(PACKAGES)
        ws.values[p][f"x{len(ws.values[p])}"] = rng.randrange(1000)
        ws.write_package(p)

    def remove_target(rng: random.Random) -> None:
        p = rng.randrange(PACKAGES)
        extra = [n for n in ws.values[p] if n not in ("t0",)]
        if extra:
            del ws.values[p][rng.choice(extra)]
            ws.write_package(p)

    def loaded_file(_rng: random.Random) -> None:  # b.star is loaded through a.star only
        ws.b += 1
        (ws.root / "lib/b.star").write_text(f'B = "b{ws.b}"\n')

    def rules_module(_rng: random.Random) -> None:
        ws.default += 1
        (ws.root / "rules/r.py").write_text(RULES.replace("attr.int(default=0)", f"attr.int(default={ws.default})"))

    def environment(rng: random.Random) -> None:  # read by the rules module when it is imported
        ws.env["MB_MODE"] = f"m{rng.randrange(1000)}"

    def glob_file(_rng: random.Random) -> None:
        (ws.root / f"p4/data/d{ws.data}.txt").write_text("more\n")
        ws.data += 1

    return [
        ("attribute", attribute),
        ("add target", add_target),
        ("remove target", remove_target),
        ("loaded file", loaded_file),
        ("rules module", rules_module),
        ("environment", environment),
        ("glob", glob_file),
    ]


def _assert_same_as_cold(ws: Workspace) -> dict[str, object]:
    """The plan with the cache as previous runs left it equals the plan of a cold load (cache removed)."""
    reused = ws.plan()
    ws.drop_cache()
    cold = ws.plan()
    assert reused == cold
    return reused


def test_the_reused_path_plans_exactly_what_a_cold_analysis_plans(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    first = ws.plan()
    assert len(ws.entries()) == PACKAGES  # written: the cache is really in use below
    assert _assert_same_as_cold(ws) == first
    rng = random.Random(24)
    edits = _edits(ws)
    plans = [first]
    for _ in range(12):
        # one to three edits in different packages or files, then a build with the cache the last one left
        for _ in range(rng.randint(1, 3)):
            _name, edit = rng.choice(edits)
            edit(rng)
        ws.settle()
        plans.append(_assert_same_as_cold(ws))
    for _name, edit in edits:  # each kind at least once, alone
        edit(rng)
        ws.settle()
        plans.append(_assert_same_as_cold(ws))
    assert len({json.dumps(p, sort_keys=True) for p in plans}) > len(edits)  # the edits changed what is planned


def _paths(plan: dict[str, object]) -> dict[str, str]:
    return {t["label"]: t["output_path"] for t in plan["targets"]}  # type: ignore[attr-defined]


def test_an_edit_in_one_package_does_not_evaluate_the_others(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    before = _paths(ws.plan())
    # p5's BUILD file becomes a syntax error of the same size, at the same inode and mtime: only an evaluation sees it
    build5 = ws.root / "p5/BUILD.marin"
    stat = os.stat(build5)
    build5.write_text("(" * stat.st_size)
    os.utime(build5, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert os.stat(build5).st_ino == stat.st_ino
    ws.values[1]["t0"] = 777
    ws.write_package(1)
    ws.settle()
    after = _paths(ws.plan())  # p1 evaluated again (its new value shows), p5 restored
    assert after.keys() == before.keys()
    changed = {label for label in after if after[label] != before[label]}
    assert "//p1:t0" in changed and "//p5:t1" in changed  # p5 depends on p1 through p2..p4
    assert "//p5:t0" in changed and "//p1:t1" not in changed and "//p0:t0" not in changed
    # `marinbuild clean` drops the cache: now p5 is evaluated, and its BUILD file is an error
    ws.run("clean")
    result = ws.run("build", "-n", "//...", check=False)
    assert result.returncode == 2
    assert "p5/BUILD.marin:1:" in result.stderr


def test_a_damaged_cache_is_ignored(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.plan()
    entries = ws.entries()
    assert len(entries) == PACKAGES
    for i, entry in enumerate(entries):  # a torn write, had the write not been atomic: half an entry, or none
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2] if i % 2 else b"")
    (ws.root / ".marinbuild/packages/header.bin").write_bytes(b"\x00garbage")
    ws.values[0]["t1"] = 5
    ws.write_package(0)
    ws.settle()
    _assert_same_as_cold(ws)


def test_a_build_killed_while_writing_entries_leaves_none_used_wrongly(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.plan()
    for round_ in range(6):
        for p in range(PACKAGES):  # every package is evaluated and written again by the build killed below
            ws.values[p]["t1"] += 1
            ws.write_package(p)
        ws.settle()
        child = subprocess.Popen(
            [sys.executable, "-m", "marinbuild", "build", "-n", "//..."],
            cwd=ws.root,
            env=ws.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.15 * (round_ + 1))  # a different moment each round: importing, loading, writing, analysing
        child.send_signal(signal.SIGKILL)
        child.wait()
        _assert_same_as_cold(ws)


def test_the_snapshot_of_a_build_with_restored_packages_signs_what_they_loaded(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.run("build", "//...")  # evaluates every package, writes the cache
    ws.values[1]["t1"] += 1
    ws.write_package(1)
    ws.settle()
    ws.run("build", "//...")  # p2 restored: the snapshot this build writes must still sign lib/b.star
    (ws.root / "lib/b.star").write_text('B = "b-edited"\n')
    ws.settle()
    with_snapshot = ws.plan()
    assert {p["state"] for p in with_snapshot["plan"]} != {"built"}  # type: ignore[union-attr]
    ws.drop_cache()
    assert ws.plan() == with_snapshot


def test_a_build_file_edited_just_before_a_build_is_not_trusted(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    ws.plan()
    build1 = ws.root / "p1/BUILD.marin"
    ws.values[1]["t0"] = 500
    ws.write_package(1)  # edited now: within the racy window of the next build
    stat = os.stat(build1)
    first = _paths(ws.plan())
    # a second edit within the same clock tick: same size, same inode, same mtime as the first
    ws.values[1]["t0"] = 600
    ws.write_package(1)
    os.utime(build1, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert (os.stat(build1).st_size, os.stat(build1).st_ino) == (stat.st_size, stat.st_ino)
    second = _paths(ws.plan())
    assert second["//p1:t0"] != first["//p1:t0"]
    ws.drop_cache()
    assert _paths(ws.plan()) == second
