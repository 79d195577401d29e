"""``group``: one name for several targets. Building it builds each of them (and what they need), once; query
and dry runs see its targets; a group listing a group is a located load error."""

from __future__ import annotations

import json
import subprocess
import sys

from workspaces import CliWorkspace, assert_one_line_load_error, two_step_workspace

GROUP = """
load("@marinbuild//rules:group.py", "group")

group(name = "both", targets = [":a", ":b"])
"""


def test_a_group_builds_its_targets_and_has_no_step_of_its_own(tmp_path):
    root = two_step_workspace(tmp_path / "ws", "group_steps")
    with (root / "pipe" / "BUILD.marin").open("a") as f:
        f.write(GROUP)
    ws = CliWorkspace(root)
    dry = ws.build("-n", "//pipe:both", "--output", "json")
    assert dry.code == 0, dry.stderr
    assert [p["step"] for p in json.loads(dry.stdout)["plan"]] == ["pipe/a", "pipe/b"]
    query = subprocess.run(
        [sys.executable, "-m", "marinbuild", "query", "deps(//pipe:both, 1)", "--output", "label_kind"],
        cwd=root,
        env=ws.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sorted(query.stdout.splitlines()) == [
        "group rule //pipe:both",
        "python_step rule //pipe:a",
        "python_step rule //pipe:b",
    ]
    built = ws.build("//pipe:both")
    assert built.code == 0 and built.ran == {"pipe/a", "pipe/b"}, built.stderr
    assert [p.name.split("-")[0] for p in sorted((root / "out" / "pipe").iterdir())] == ["a", "b"]
    assert ws.build("//pipe:both").ran == set()


def test_a_group_of_a_group_is_a_located_load_error(tmp_path):
    root = two_step_workspace(tmp_path / "ws", "group_steps_nested")
    with (root / "pipe" / "BUILD.marin").open("a") as f:
        f.write(GROUP + 'group(name = "outer", targets = [":both"])\n')
    assert_one_line_load_error(
        root, "//pipe:outer", "pipe/BUILD.marin:10:1", "group: //pipe:both is itself several steps (a group)"
    )
