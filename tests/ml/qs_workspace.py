"""A copy of the quickstart in a temporary workspace, and running builds in it (helpers of the ML tests).

The copy is the real ``experiments/quickstart`` (BUILD.marin, data/ and tasks/) with a shorter run
(30 steps, a checkpoint every 10, an evaluation every 10) so the suite stays within a few
minutes on two CPU cores. Builds run ``python -m marinbuild`` as a child process, as a person
would, with a build-event file; ``Build.ran`` is the set of steps that actually ran.
Tests that need levanter are skipped with a reason when the ``ml`` extra is not installed.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from workspaces import Build, CliWorkspace

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "experiments" / "quickstart"
HAVE_LEVANTER = importlib.util.find_spec("levanter") is not None
needs_levanter = pytest.mark.skipif(
    not HAVE_LEVANTER, reason="levanter is not installed (the ml extra: pip install -e '.[ml]')"
)

STEPS = frozenset(
    f"experiments/quickstart/{name}"
    for name in (
        "stories_train",
        "stories_validation",
        "tokenizer",
        "stories_tokenized",
        "lm",
        "eval",
        "story_tasks",
        "report",
    )
)
"""Every step of the quickstart (``package/name``, as build events name them)."""

# The quickstart, shortened for the test suite: (text in BUILD.marin, replacement).
SHORTER = [
    ('"num_train_steps": 100,', '"num_train_steps": 30,'),
    ('"checkpoint_every": 25,', '"checkpoint_every": 10,'),
    ('"steps_per_eval": 20,', '"steps_per_eval": 10,'),
]


class Workspace(CliWorkspace):
    """A workspace holding a copy of the quickstart package; ``build`` runs marinbuild in it (nothing may reach
    for the Hub)."""

    def __init__(self, root: Path):
        super().__init__(root, {"HF_HUB_OFFLINE": "1"})
        self.package = root / "experiments" / "quickstart"
        self.prefix = root / "out"

    def marinbuild(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command(*args), cwd=self.root, capture_output=True, text=True, timeout=timeout, env=self.env()
        )

    def build(self, *targets: str, timeout: float = 900) -> Build:
        """``marinbuild TARGETS`` (default: the whole quickstart)."""
        return super().build(*(targets or ("//experiments/quickstart:all",)), timeout=timeout)

    def output(self, name: str) -> Path:
        """The newest successful output folder of step ``experiments/quickstart/<name>``."""
        candidates = [
            p
            for p in (self.prefix / "experiments" / "quickstart").glob(f"{name}-*")
            if (p / ".executor_status").exists() and "SUCCESS" in (p / ".executor_status").read_text()
        ]
        assert candidates, f"no successful output of {name} under {self.prefix}"
        return max(candidates, key=lambda p: p.stat().st_mtime)

    def edit_build(self, old: str, new: str) -> None:
        path = self.package / "BUILD.marin"
        text = path.read_text()
        assert old in text, f"{old!r} not in BUILD.marin"
        path.write_text(text.replace(old, new, 1))


def make_workspace(root: Path) -> Workspace:
    package = root / "experiments" / "quickstart"
    shutil.copytree(QUICKSTART / "data", package / "data")
    shutil.copytree(QUICKSTART / "tasks", package / "tasks")
    text = (QUICKSTART / "BUILD.marin").read_text()
    for old, new in SHORTER:
        assert old in text, f"the quickstart's BUILD.marin no longer has {old!r}: update SHORTER in {__file__}"
        text = text.replace(old, new)
    (package / "BUILD.marin").write_text(text)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "quickstart-test"\n\n[tool.marinbuild]\nprefix = "out"\n'
        "heartbeat_interval = 1\nstale_after = 4\n"
    )
    return Workspace(root)
