"""Small marinbuild workspaces written for CLI tests: a ``pyproject.toml`` and the files given; ``CliWorkspace``
runs ``marinbuild`` in one as a user does (a child process) and reads back the build's events."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def write_workspace(root: Path, files: dict[str, str], prefix: str = "out") -> Path:
    """Write ``root/pyproject.toml`` (prefix ``prefix``) and each ``relative path -> text`` (dedented); return root."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "{prefix}"\n')
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


REPOSITORY = Path(__file__).resolve().parents[1]


def repository_workspace(root: Path) -> Path:
    """A copy of this repository's own workspace (``pyproject.toml``, ``experiments/``, ``rules/``) at ``root``.

    A CLI test of the repository's targets runs in the copy, not in the checkout: a build writes
    ``.marinbuild/`` (stat cache, event logs) into its workspace, and tests running side by side
    (pytest-xdist), or a developer's own builds, would otherwise share and leave that state."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPOSITORY / "pyproject.toml", root / "pyproject.toml")
    for folder in ("experiments", "rules"):
        shutil.copytree(REPOSITORY / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", ".marinbuild"))
    return root


def age_workspace(root: Path) -> float:
    """Set ``root`` and everything under it a minute into the past, outside the racy window in which the stat cache
    distrusts a recently changed input; return that time."""
    old = time.time() - 60
    for path in [root, *root.rglob("*")]:
        os.utime(path, (old, old))
    return old


def two_step_workspace(root: Path, module: str) -> Path:
    """A workspace of two ``python_step`` targets, ``//pipe:a`` and ``//pipe:b`` (which depends on ``a``), each
    writing its ``text`` to ``out.txt`` with ``<module>:write``. ``python_step`` imports a step's module once per
    process, so each test file names its own ``module``."""
    steps = """
        import os


        def write(config):
            os.makedirs(config["output_path"], exist_ok=True)
            with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
                f.write(config["text"])
        """
    build = f"""
        load("@marinbuild//rules:python.py", "python_step")

        python_step(name = "a", fn = "{module}:write", config = {{"text": "A"}})
        python_step(name = "b", fn = "{module}:write", config = {{"text": "B"}}, deps = [":a"])
        """
    return write_workspace(root, {f"{module}.py": steps, "pipe/BUILD.marin": build})


def assert_one_line_load_error(root: Path, label: str, where: str, message: str) -> None:
    """``marinbuild build label`` in a child process exits 2 with one stderr line that starts at ``where``
    (``path:line:col``) and says ``message``, and writes nothing under the prefix ``out``."""
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    result = subprocess.run(
        [sys.executable, "-m", "marinbuild", "build", label],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"marinbuild: error: {where}: "), (where, lines[0])
    assert message in lines[0], lines[0]
    assert not (root / "out").exists()  # nothing ran, nothing was written


@dataclass
class Build:
    """One ``marinbuild`` run: its exit code, output, build events (``--build_event_json_file``) and duration."""

    code: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]]
    seconds: float = 0.0

    @property
    def ran(self) -> set[str]:
        """Names (``package/name``) of the steps this build ran."""
        return {e["step"] for e in self.events if e["kind"] == "started"}

    @property
    def already_built(self) -> set[str]:
        """Steps the plan found built (so not run)."""
        return {e["step"] for e in self.events if e["kind"] == "planned" and e["detail"] == "built"}


class CliWorkspace:
    """A workspace at ``root`` in which ``build`` runs ``marinbuild`` in a child process; ``$MARIN_PREFIX`` is
    unset for it (the workspace's ``pyproject.toml`` names the prefix) and ``env`` is added to its environment.
    The build-event files go to ``events_dir`` (default: ``root``)."""

    def __init__(self, root: Path, env: dict[str, str] | None = None, events_dir: Path | None = None):
        self.root = root
        self.extra_env = dict(env or {})
        self.events_dir = events_dir or root
        self.builds = 0

    def command(self, *args: str, events: Path | None = None) -> list[str]:
        extra = ["--build_event_json_file", str(events)] if events is not None else []
        return [sys.executable, "-m", "marinbuild", *args, *extra]

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
        env.update(self.extra_env)
        return env

    def build(self, *args: str, timeout: float = 600) -> Build:
        """``marinbuild ARGS``, its events written to ``events_dir/events-<n>.jsonl`` (n: 1, 2, ...)."""
        self.builds += 1
        events = self.events_dir / f"events-{self.builds}.jsonl"
        started = time.monotonic()
        proc = subprocess.run(
            self.command(*args, events=events),
            cwd=self.root,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        seconds = time.monotonic() - started
        records = [json.loads(line) for line in events.read_text().splitlines()] if events.exists() else []
        return Build(proc.returncode, proc.stdout, proc.stderr, records, seconds)
