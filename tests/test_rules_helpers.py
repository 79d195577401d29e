"""A rules module that imports a sibling helper module (``from . import common``), through the real CLI."""

from __future__ import annotations

from pathlib import Path

from workspaces import CliWorkspace, age_workspace, write_workspace

GREET = """
import os

from marinbuild.load import attr, rule

from . import common


def _impl(ctx):
    os.makedirs(ctx.output_path, exist_ok=True)
    with open(os.path.join(ctx.output_path, "out.txt"), "w") as f:
        f.write(ctx.attr.text)
    return {"text": ctx.attr.text}


greet = rule(implementation=_impl, attrs={"text": attr.string(default=common.GREETING)})
"""


def test_a_change_to_a_helper_module_is_seen_by_the_next_build(tmp_path: Path) -> None:
    """The helper is loaded as part of the rules folder's package, and the next build sees an edit to it."""
    root = write_workspace(
        tmp_path / "ws",
        {
            "rules/common.py": 'GREETING = "hi"\n',
            "rules/greet.py": GREET,
            "pkg/BUILD.marin": 'load("//rules:greet.py", "greet")\ngreet(name = "g")\n',
        },
    )
    age_workspace(root)
    ws = CliWorkspace(root)
    first = ws.build("//pkg:g")
    assert first.code == 0, first.stderr
    assert first.ran == {"pkg/g"}
    again = ws.build("//pkg:g")
    assert again.code == 0 and again.ran == set(), again.stderr
    (root / "rules" / "common.py").write_text('GREETING = "hello"\n')
    edited = ws.build("//pkg:g")
    assert edited.code == 0, edited.stderr
    assert edited.ran == {"pkg/g"}  # the default it gives the attribute changed: a new version
    outputs = sorted((root / "out" / "pkg").glob("g-*/out.txt"))
    assert sorted(p.read_text() for p in outputs) == ["hello", "hi"]
