"""A copy of the quickstart in a temporary workspace, and running builds in it (helpers of the ML tests).

The copy is the real ``experiments/quickstart`` (BUILD.marin, data/ and tasks/) with a shorter run
(30 steps, a checkpoint every 10, an evaluation every 10) so the suite stays within a few
minutes on two CPU cores. Builds run ``python -m marinbuild`` as a child process, as a person
would, with a build-event file; ``Build.ran`` is the set of steps that actually ran.
Tests that need levanter are skipped with a reason when the ``ml`` extra is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "experiments" / "quickstart"
HAVE_LEVANTER = importlib.util.find_spec("levanter") is not None
needs_levanter = pytest.mark.skipif(
    not HAVE_LEVANTER, reason="levanter is not installed (the ml extra: pip install -e '.[ml]')"
)

# The quickstart, shortened for the test suite: (text in BUILD.marin, replacement).
SHORTER = [
    ('"num_train_steps": 100,', '"num_train_steps": 30,'),
    ('"checkpoint_every": 25,', '"checkpoint_every": 10,'),
    ('"steps_per_eval": 20,', '"steps_per_eval": 10,'),
]


@dataclass
class Build:
    code: int
    stdout: str
    stderr: str
    events: list[dict]
    seconds: float

    @property
    def ran(self) -> set[str]:
        """Names (``package/name``) of the steps this build ran."""
        return {e["step"] for e in self.events if e["kind"] == "started"}

    @property
    def already_built(self) -> set[str]:
        """Steps the plan found built (so not run)."""
        return {e["step"] for e in self.events if e["kind"] == "planned" and e["detail"] == "built"}


class Workspace:
    """A workspace holding a copy of the quickstart package; ``build`` runs marinbuild in it."""

    def __init__(self, root: Path):
        self.root = root
        self.package = root / "experiments" / "quickstart"
        self.prefix = root / "out"
        self._n = 0

    def marinbuild(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "marinbuild", *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
        )

    def build(self, *targets: str, timeout: float = 900) -> Build:
        self._n += 1
        events = self.root / f"events-{self._n}.jsonl"
        started = time.monotonic()
        proc = self.marinbuild(
            *(targets or ("//experiments/quickstart:all",)), "--build_event_json_file", str(events), timeout=timeout
        )
        seconds = time.monotonic() - started
        records = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
        return Build(proc.returncode, proc.stdout, proc.stderr, records, seconds)

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


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MARIN_PREFIX", None)
    env["HF_HUB_OFFLINE"] = "1"  # nothing in these tests may reach for the Hub
    return env


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
