"""Small marinbuild workspaces written for CLI tests: a ``pyproject.toml`` and the files given."""

from __future__ import annotations

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
