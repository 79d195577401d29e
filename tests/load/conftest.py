"""Fixtures for loader tests: throw-away workspaces written from a dict of files."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from marinbuild.load import Workspace

RULES = """
from dataclasses import dataclass, field

from marinbuild.load import attr, rule


@dataclass
class Optim:
    lr: float = 3e-4
    warmup: int = 0


@dataclass
class TrainConfig:
    steps: int
    optim: Optim = field(default_factory=Optim)


def _impl(ctx):
    return None


_hidden = 42

tokenize = rule(
    implementation=_impl,
    attrs={"srcs": attr.source_files(), "tokenizer": attr.string(default="llama3")},
    doc="Tokenize files.",
)
train = rule(
    implementation=_impl,
    attrs={
        "data": attr.label_keyed_dict(value=float),
        "deps": attr.label_list(),
        "dep": attr.label(),
        "steps": attr.int(default=10),
        "lr": attr.float(default=0.1),
        "flag": attr.bool(),
        "tags": attr.list(of=str),
        "extra": attr.dict(),
        "config": attr.config(TrainConfig),
        "resources": attr.dict(versioned=False),
    },
)
needs_data = rule(implementation=_impl, attrs={"data": attr.label(mandatory=True)})
"""

WriteWorkspace = Callable[..., Workspace]


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


@pytest.fixture
def make_ws(tmp_path: Path) -> WriteWorkspace:
    """``make_ws({"a/BUILD.marin": "...", ...}, rules=True)``: a workspace with those files (and rules/test.py)."""

    def make(files: dict[str, str], rules: bool = True, root: Path | None = None) -> Workspace:
        base = root or tmp_path / "ws"
        base.mkdir(parents=True, exist_ok=True)
        (base / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.marinbuild]\n")
        if rules:
            write_files(base, {"rules/test.py": RULES})
        write_files(base, files)
        return Workspace(base, {})

    return make
