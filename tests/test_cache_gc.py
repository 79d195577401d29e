"""``marinbuild cache gc`` through the real CLI on a workspace of two packages: it keeps what any current target of
the workspace uses unless ``--keep_only_used_by_patterns`` says otherwise, and says why each output goes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
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


def versions_of_x(tmp_path: Path, count: int, build: str = "") -> tuple[Path, list[str]]:
    """A workspace whose //a:x was built in ``count`` versions, the status of version i written i days before the
    last; its outputs, oldest first. ``build``: a BUILD file line added to package a (a pinned target...)."""
    ws = write_workspace(tmp_path / "ws", {"gc_steps.py": STEPS, "a/BUILD.marin": ""})
    made: list[str] = []
    for v in range(1, count + 1):
        (ws / "a/BUILD.marin").write_text(package({"x": v}) + build)
        marinbuild(ws, "//a:all")
        (new,) = (p for p in outputs(ws, "a") if p not in made and "/x-" in p)
        made.append(new)
    now = time.time()
    for i, path in enumerate(made):
        os.utime(Path(path, st.STATUS_FILE), (now, now - (count - 1 - i) * 86400))
    return ws, made


def offered(result: dict[str, Any]) -> list[str]:
    skipped = {s["output_path"] for s in result["skipped"]}
    return sorted(c["output_path"] for c in result["candidates"] if c["output_path"] not in skipped)


def same(paths: list[str]) -> list[str]:
    return sorted(paths)


def test_gc_policies_only_narrow_what_is_offered(tmp_path: Path) -> None:
    ws, made = versions_of_x(tmp_path, 5)  # made[4] is current: kept whatever the policy
    assert offered(gc(ws, "//a:all")) == same(made[:4])
    kept_last = gc(ws, "//a:all", "--keep_last", "3")
    assert offered(kept_last) == same(made[:2])
    assert {s["output_path"]: s["reason"] for s in kept_last["skipped"]}[made[3]] == (
        "one of the 3 newest versions of a/x (--keep_last)"
    )
    older = gc(ws, "//a:all", "--older_than", "2.5d")
    assert offered(older) == same(made[:2])  # written 4 and 3 days ago; 2 and 1 day ago stay
    assert any(s["reason"].startswith("newer than --older_than 2d12h (written 2d") for s in older["skipped"])
    listed = gc(ws, "//a:all")
    sizes = {c["output_path"]: c["size"] for c in listed["candidates"]}
    total = listed["prefix_bytes"] - sizes[made[0]] - sizes[made[1]] + 1  # over by less than the two oldest
    capped = gc(ws, "//a:all", "--max_bytes", str(total), "--yes")
    # the oldest first, only as many as needed
    assert capped["deleted"] == made[:2] and outputs(ws, "a") == same(made[2:])
    assert capped["over_max_bytes"] == 0
    text = marinbuild(ws, "cache", "gc", "//a:all", "--max_bytes", "1")
    assert "over --max_bytes: the rest is used, pinned or kept" in text  # the current output alone is over


def test_pinned_outputs_are_never_deleted(tmp_path: Path) -> None:
    pinned = 'python_step(name = "p", fn = "gc_steps:write", config = {"v": V}, pin = True)\n'
    ws = write_workspace(tmp_path / "ws", {"gc_steps.py": STEPS, "a/BUILD.marin": ""})
    for v in (1, 2):
        (ws / "a/BUILD.marin").write_text(package({"x": v}) + pinned.replace("V", str(v)))
        marinbuild(ws, "//a:all")
        if v == 1:
            old_p, old_x = outputs(ws, "a")  # the first versions of //a:p and //a:x
    result = gc(ws, "//a:all", "--yes")
    assert {s["output_path"]: s["reason"] for s in result["skipped"]} == {old_p: "pinned: //a:p has pin = True"}
    assert result["deleted"] == [old_x] and Path(old_p, st.STATUS_FILE).exists()

    (ws / "a/BUILD.marin").write_text(package({"x": 3}) + pinned.replace("V", "2").replace(", pin = True", ""))
    marinbuild(ws, "//a:all")
    old_x = next(p for p in outputs(ws, "a") if "/x-" in p)  # its second version (the first is gone)
    (ws / "pins.txt").write_text("# what gc keeps\n//a:p\n")
    (ws / "more_pins.txt").write_text(f"a/{Path(old_x).name.split('-')[0]}-*  # every version of a/x\n")
    pins = gc(ws, "//a:all", "--pins", "pins.txt", "--pins", "more_pins.txt", "--yes")
    assert pins["deleted"] == [] and Path(old_p).exists()
    reasons = sorted(s["reason"] for s in pins["skipped"])
    assert reasons[0] == "pinned: //a:p is in a pins file" and reasons[-1].startswith("pinned: matches a/x-* (")

    bad = subprocess.run(
        [sys.executable, "-m", "marinbuild", "cache", "gc", "//a:all", "--older_than", "30"],
        cwd=ws,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "'30' is not an age" in bad.stderr and "Traceback" not in bad.stderr
    (ws / "a/BUILD.marin").write_text(package({"x": 3}) + pinned.replace("V", "2").replace("True", '"yes"'))
    bad = subprocess.run([sys.executable, "-m", "marinbuild", "//a:p"], cwd=ws, capture_output=True, text=True)
    assert bad.returncode == 2 and "a/BUILD.marin:3:67: attribute 'pin' must be True or False" in bad.stderr
