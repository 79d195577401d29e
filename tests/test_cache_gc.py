"""``marinbuild cache gc`` through the real CLI on a workspace of two packages: it keeps what any current target of
the workspace uses unless ``--keep_only_used_by_patterns`` says otherwise, and says why each output goes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from workspaces import write_workspace

from marinbuild.store import status as st

STEPS = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(repr(config))
"""


def package(targets: dict[str, int]) -> str:
    """A BUILD file of ``python_step`` targets, each ``name = version`` in its config."""
    lines = ['load("@marinbuild//rules:python.py", "python_step")']
    lines += [f'python_step(name = "{n}", fn = "gc_steps:write", config = {{"v": {v}}})' for n, v in targets.items()]
    return "\n".join(lines) + "\n"


def marinbuild(ws: Path, *args: str) -> str:
    """``marinbuild ARGS`` in ``ws`` (a child process, as a user runs it); its stdout. It must succeed."""
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    env["PYTHONPATH"] = os.pathsep.join([str(ws), *sys.path])
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def gc(ws: Path, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(marinbuild(ws, "cache", "gc", *args, "--output", "json"))
    return result


DOCS = Path(__file__).resolve().parents[1] / "docs" / "caching.md"
SIZE = re.compile(r"\d+(\.\d+)? [KMG]?i?B\b")


def assert_the_example_of_the_docs(ws: Path) -> None:
    """docs/caching.md's example of ``cache gc`` is what it prints in this state (sizes aside: the metadata holds
    the test's own paths), with the workspace's prefix for ``/data/out``."""
    text = DOCS.read_text()
    example = text[text.index("```\n$ marinbuild cache gc") + 4 :]
    example = example[: example.index("```")]
    printed = ""
    for command in re.findall(r"^\$ marinbuild (.*)$", example, flags=re.M):
        printed += f"$ marinbuild {command}\n" + marinbuild(ws, *command.split()).rstrip("\n") + "\n\n"
    expected = example.replace("/data/out", str(ws / "out"))
    assert SIZE.sub("SIZE", printed.rstrip("\n")) == SIZE.sub("SIZE", expected.rstrip("\n"))


def outputs(ws: Path, pkg: str) -> list[str]:
    return sorted(str(p) for p in (ws / "out" / pkg).iterdir())


def test_gc_of_one_package_keeps_the_other_packages_outputs(tmp_path: Path) -> None:
    ws = write_workspace(
        tmp_path / "ws",
        {"gc_steps.py": STEPS, "a/BUILD.marin": package({"x": 1}), "b/BUILD.marin": package({"y": 1, "gone": 1})},
    )
    marinbuild(ws, "//a:all", "//b:all")
    (old_x,) = outputs(ws, "a")
    (ws / "a/BUILD.marin").write_text(package({"x": 2}))  # a new version of //a:x; the old one stays
    marinbuild(ws, "//a:all")
    (new_x,) = (p for p in outputs(ws, "a") if p != old_x)
    (gone,) = (p for p in outputs(ws, "b") if "/gone-" in p)
    (y,) = (p for p in outputs(ws, "b") if "/y-" in p)
    (ws / "b/BUILD.marin").write_text(package({"y": 1}))  # //b:gone is no target any more

    listed = gc(ws, "//a:all")
    assert [c["output_path"] for c in listed["candidates"]] == [old_x]
    assert listed["reasons"] == {old_x: "an old version of a/x (//a:x)"}
    assert listed["scope"] == "workspace" and listed["kept"] == 2  # the new //a:x and //b:y
    assert listed["left"] == 1  # //b:gone's output is outside //a:all: not offered
    assert_the_example_of_the_docs(ws)
    text = marinbuild(ws, "cache", "gc", "//a:all")
    assert "kept 2 output(s) that current targets of the workspace (//...) use" in text
    assert "left alone 1 unused output(s) outside //a:all (cache gc //... lists them)" in text
    assert f"{old_x}  would delete: an old version of a/x (//a:x)" in text
    assert "Nothing deleted (confirm with --yes)" in text

    done = gc(ws, "//a:all", "--yes")
    assert done["deleted"] == [old_x]
    assert outputs(ws, "a") == [new_x] and outputs(ws, "b") == sorted([gone, y])
    assert Path(y, st.STATUS_FILE).read_text() == "SUCCESS"

    # The whole workspace: the output of a target that is gone is offered too.
    everything = gc(ws, "//...")
    assert [c["output_path"] for c in everything["candidates"]] == [gone]
    assert everything["reasons"] == {gone: "no current target of the workspace makes a step named b/gone"}
    assert everything["kept"] == 2 and everything["left"] == 0

    # Narrowed on purpose: what //a:all does not use goes, the current output of //b:y too, said as such.
    narrow = gc(ws, "//a:all", "--keep_only_used_by_patterns")
    assert narrow["scope"] == "patterns" and narrow["kept"] == 1
    assert [c["output_path"] for c in narrow["candidates"]] == sorted([gone, y])
    assert narrow["reasons"][y] == "the current output of b/y (//b:y), which //a:all does not use"
    text = marinbuild(ws, "cache", "gc", "//a:all", "--keep_only_used_by_patterns")
    assert "kept 1 output(s) that //a:all uses (--keep_only_used_by_patterns: other targets' outputs are not kept)" in (
        text
    )
    assert outputs(ws, "b") == sorted([gone, y])  # listed, not deleted
    assert sorted(gc(ws, "//a:all", "--keep_only_used_by_patterns", "--yes")["deleted"]) == sorted([gone, y])
    assert outputs(ws, "a") == [new_x] and outputs(ws, "b") == []


def test_the_readme_and_the_docs_say_what_gc_keeps_in_the_same_words() -> None:
    def words(text: str) -> str:
        return " ".join(text.split())

    root = DOCS.parents[1]
    readme = (root / "README.md").read_text().splitlines()
    (row,) = (line for line in readme if line.startswith("| `marinbuild cache gc"))
    scope = words(row.split(" | ")[1].split(" ([caching.md]")[0])
    assert "never deletes another package's work" in scope
    assert scope in words(DOCS.read_text())
    assert scope in words((root / "docs" / "cli.md").read_text())
