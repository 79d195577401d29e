"""Small marinbuild workspaces written for CLI tests: a ``pyproject.toml`` and the files given."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def write_workspace(root: Path, files: dict[str, str], prefix: str = "out") -> Path:
    """Write ``root/pyproject.toml`` (prefix ``prefix``) and each ``relative path -> text`` (dedented); return root."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f'[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "{prefix}"\n')
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


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
