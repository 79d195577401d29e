"""Version digests kept between builds (``marinbuild.core.version_digests``): an unchanged step's version string is
not hashed again, and every kind of input change still gives the output paths a build from scratch gives."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from workspaces import age_workspace

from marinbuild.core.placeholders import ExecutorStep, output_path_of, this_output_path, versioned
from marinbuild.core.version_digests import SLACK, DigestCache
from marinbuild.core.versions import VersionTable

# -- the table alone -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    output_path: str
    value: object
    inputs: list[object]


def graph(bottom: int) -> list[ExecutorStep]:
    """A chain of 8 (deeper than the inlining depth) with a fan of 3 on each link; ``bottom`` is the first step's
    versioned value."""
    steps: list[ExecutorStep] = []
    for i in range(8):
        inputs = [output_path_of(s) for s in steps[-3:]]
        value = versioned(bottom if i == 0 else i)
        steps.append(ExecutorStep(name=f"s{i}", fn=print, config=Config(this_output_path(), value, inputs)))
    return steps


def versioned_table(steps: list[ExecutorStep], digests: DigestCache | None) -> VersionTable:
    table = VersionTable("/prefix")
    if digests is not None:
        table.use_digests(digests)
    for step in steps:
        table.compute_version(step)
    return table


def results(table: VersionTable, steps: list[ExecutorStep]) -> list[tuple[str, str, bytes]]:
    return [(table.output_paths[s], table.action_digest(s), table.version_strs[s].encode()) for s in steps]


def test_digests_from_an_earlier_table_give_the_same_paths_and_actions(tmp_path: Path) -> None:
    cache = DigestCache(tmp_path / "digests.bin")
    first = graph(0)
    assert results(versioned_table(first, cache), first) == results(versioned_table(first, None), first)
    cache.save()
    again = DigestCache(tmp_path / "digests.bin")
    assert len(again.old) == 8
    changed = graph(1)  # the bottom of the chain: every step's version changes, through inlined and short forms
    fresh = results(versioned_table(changed, None), changed)
    assert results(versioned_table(changed, again), changed) == fresh
    assert [r[0] for r in fresh] != [r[0] for r in results(versioned_table(first, None), first)]
    same = graph(0)
    assert results(versioned_table(same, again), same) == results(versioned_table(first, None), first)


def test_a_recorded_digest_is_used_not_recomputed(tmp_path: Path) -> None:
    """Observed by a digest file whose entry for the first step was replaced: its output path follows the file."""
    cache = DigestCache(tmp_path / "digests.bin")
    steps = graph(0)
    table = versioned_table(steps, cache)
    for s in steps:
        table.action_digest(s)
    cache.save()
    saved = DigestCache(tmp_path / "digests.bin").old
    md5 = hashlib.md5(table.version_strs[steps[0]].encode()).digest()
    (key,) = [k for k, value in saved.items() if value[:16] == md5]  # the first step's entry: (md5, sha256)
    value = saved.value(saved.index(key))
    saved.write(tmp_path / "digests.bin", {key: bytes(16) + value[16:]}, keep_unused=True)
    reused = versioned_table(graph(0), DigestCache(tmp_path / "digests.bin"))
    assert reused.output_paths[reused.steps[0]] == "/prefix/s0-000000"


# -- through the command line ----------------------------------------------------------------------------------

STEPS_PY = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(str(config.get("text", "")))
"""

RULES_PY = """
import os

from marinbuild.load import attr, rule

FLAVOR = os.environ.get("MB_FLAVOR", "plain")


def _impl(ctx):
    os.makedirs(ctx.output_path, exist_ok=True)


flavored = rule(implementation=_impl, attrs={"text": attr.string(default=FLAVOR), "deps": attr.label_list()})
"""

LOW = """
load("@marinbuild//rules:python.py", "python_step")
load("//lib:consts.star", "TEXT")

python_step(name = "n0", fn = "digest_steps:write", config = {"text": TEXT}, srcs = ["data.txt"])
python_step(name = "n1", fn = "digest_steps:write", config = {"text": "1"}, deps = [":n0"])
python_step(name = "n2", fn = "digest_steps:write", config = {"text": "2"}, deps = [":n1", ":n0"])
"""

HIGH = """
load("@marinbuild//rules:python.py", "python_step")
load("//rules:flavor.py", "flavored")

python_step(name = "n3", fn = "digest_steps:write", config = {"text": "3"}, deps = ["//low:n2", "//low:n1"])
flavored(name = "n4", deps = [":n3"])
python_step(name = "n5", fn = "digest_steps:write", config = {"text": "5"}, deps = [":n4", ":n3"])
python_step(name = "n6", fn = "digest_steps:write", config = {"text": "6"}, deps = [":n5"])
python_step(name = "n7", fn = "digest_steps:write", config = {"text": "7"}, deps = [":n6", "//low:n0"])
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    files = {
        "pyproject.toml": '[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "../out"\n',
        "digest_steps.py": STEPS_PY,
        "rules/flavor.py": RULES_PY,
        "lib/consts.star": 'TEXT = "A"\n',
        "low/BUILD.marin": LOW,
        "low/data.txt": "data\n",
        "high/BUILD.marin": HIGH,
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def mb(ws: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MB_FLAVOR")}
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", *args],
        cwd=ws,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def planned(ws: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Step name -> output path, as a dry run plans them."""
    rows = [line.split() for line in mb(ws, "-n", "//...", *args, env=env).stdout.splitlines()]
    return {row[1]: row[2] for row in rows if len(row) >= 3 and row[0] in ("missing", "built")}


def entries(ws: Path) -> dict[bytes, bytes]:
    return dict(DigestCache(ws / ".marinbuild" / "version_digests.bin").old.items())


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


EDITS = {
    "a BUILD attribute": lambda ws: edit(ws / "low" / "BUILD.marin", '"text": "1"', '"text": "one"'),
    "a loaded .star file": lambda ws: edit(ws / "lib" / "consts.star", '"A"', '"B"'),
    "a rules module": lambda ws: edit(ws / "rules" / "flavor.py", '"plain"', '"salted"'),
    "a python_step module": lambda ws: edit(ws / "digest_steps.py", "import os", "import os  # edited"),
    "a source file": lambda ws: edit(ws / "low" / "data.txt", "data", "other data"),
}


@pytest.mark.parametrize("what", sorted(EDITS))
def test_an_edit_gives_the_paths_of_a_build_from_scratch(ws: Path, what: str) -> None:
    mb(ws, "//...")
    age_workspace(ws)
    mb(ws, "//...")  # every cache of the workspace now holds this state
    before = planned(ws)
    EDITS[what](ws)
    cached = planned(ws)
    mb(ws, "clean")
    assert cached == planned(ws)  # from scratch: no cache of any kind
    assert cached != before


def test_an_environment_variable_and_the_prefix(ws: Path) -> None:
    mb(ws, "//...")
    age_workspace(ws)
    mb(ws, "//...")
    before = planned(ws)
    cached = planned(ws, env={"MB_FLAVOR": "spicy"})
    other_prefix = planned(ws, "--prefix", str(ws.parent / "elsewhere"))
    mb(ws, "clean")
    assert cached == planned(ws, env={"MB_FLAVOR": "spicy"}) and cached != before
    mb(ws, "//...")
    assert other_prefix == planned(ws, "--prefix", str(ws.parent / "elsewhere"))
    assert all(path.startswith(str(ws.parent / "elsewhere")) for path in other_prefix.values())


def test_an_edit_adds_the_digests_of_the_changed_steps_only(ws: Path) -> None:
    """Each build keeps what it hashed; an edit of n5's config hashes n5, n6 and n7 (its consumers) only."""
    mb(ws, "//...")
    known = entries(ws)
    assert len(known) == 8
    edit(ws / "high" / "BUILD.marin", '"text": "5"', '"text": "five"')
    mb(ws, "//...")
    assert len(set(entries(ws)) - set(known)) == 3


def test_an_action_digest_not_hashed_before_is_hashed_and_kept(tmp_path: Path) -> None:
    cache = DigestCache(tmp_path / "digests.bin")
    versioned_table(graph(0), cache)  # md5s only: no action digest asked for
    cache.save()
    assert {v[16:] for _, v in DigestCache(tmp_path / "digests.bin").old.items()} == {bytes(32)}  # no sha256 yet
    again = DigestCache(tmp_path / "digests.bin")
    steps = graph(0)
    assert results(versioned_table(steps, again), steps) == results(versioned_table(steps, None), steps)
    again.save()
    assert bytes(32) not in {v[16:] for _, v in DigestCache(tmp_path / "digests.bin").old.items()}


def test_old_versions_do_not_pile_up(tmp_path: Path) -> None:
    """Each edit of the bottom step makes 8 new versions; the file keeps at most SLACK times what a build uses."""
    for bottom in range(6):
        cache = DigestCache(tmp_path / "digests.bin")
        versioned_table(graph(bottom), cache)
        cache.save()
        assert len(DigestCache(tmp_path / "digests.bin").old) <= SLACK * 8
