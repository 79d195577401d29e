"""The workspace: its root (a ``pyproject.toml`` with ``[tool.marinbuild]``), its config and its packages: the
folders under the root holding a ``BUILD.marin``, hidden and tool folders and the config's (workspace-relative)
``ignore_dirs`` never searched."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.load.errors import WorkspaceError, display_path

BUILD_FILE = "BUILD.marin"
SKIPPED_DIRS = frozenset({".venv", "venv", "node_modules", "__pycache__", ".git"})


def is_skipped_dir(name: str) -> bool:
    """Folders never searched for packages or globbed: hidden ones and tool caches."""
    return name.startswith(".") or name in SKIPPED_DIRS


@dataclass(frozen=True)
class Workspace:
    """A workspace root and its ``[tool.marinbuild]`` table."""

    root: Path
    config: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root).resolve())
        ignore = self.config.get("ignore_dirs", [])
        if not isinstance(ignore, list) or not all(isinstance(x, str) for x in ignore):
            raise WorkspaceError(
                f"{self.root / 'pyproject.toml'}: [tool.marinbuild] ignore_dirs must be a list of strings"
            )

    @property
    def ignored(self) -> frozenset[str]:
        return frozenset(x.strip("/") for x in self.config.get("ignore_dirs", []))

    def package_dir(self, package: str) -> Path:
        return self.root / package if package else self.root

    def build_file(self, package: str) -> Path:
        return self.package_dir(package) / BUILD_FILE

    def is_package(self, package: str) -> bool:
        if package in self.ignored or any(is_skipped_dir(part) for part in package.split("/") if part):
            return False
        return os.path.isfile(os.path.join(self.root, package, BUILD_FILE))  # build_file(package).is_file()

    def display(self, path: str | os.PathLike[str]) -> str:
        """``path`` relative to the root when inside it (for messages)."""
        return display_path(path, self.root)

    @property
    def cache_dir(self) -> Path:
        """``<root>/.marinbuild``: where the loader keeps its caches (e.g. ``stat_cache.json``)."""
        return self.root / ".marinbuild"

    @property
    def stat_cache_path(self) -> Path:
        return self.cache_dir / "stat_cache.json"

    def packages(self, under: str = "") -> list[str]:
        """All packages at or beneath ``under`` (sorted), e.g. ``["", "experiments/tutorials"]``."""
        start = self.package_dir(under)
        if not start.is_dir():
            return []
        ignored = self.ignored
        found: list[str] = []
        stack = [(str(start), under)]
        while stack:  # os.walk's walk (symbolic links to folders listed, not entered) without its lstat per folder
            folder, rel = stack.pop()
            try:
                with os.scandir(folder) as entries:
                    for entry in entries:
                        name = entry.name
                        try:
                            is_dir = entry.is_dir()
                        except OSError:
                            is_dir = False
                        if not is_dir:
                            if name == BUILD_FILE:
                                found.append(rel)
                            continue
                        sub = f"{rel}/{name}" if rel else name
                        if is_skipped_dir(name) or sub in ignored or entry.is_symlink():
                            continue
                        stack.append((entry.path, sub))
            except OSError:
                continue
        found.sort()
        return found


def _read_config(pyproject: Path) -> dict[str, Any] | None:
    import tomllib  # only for a workspace that has a pyproject.toml

    try:
        with pyproject.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise WorkspaceError(f"{pyproject}: invalid TOML: {exc}") from None
    tool = data.get("tool", {})
    table = tool.get("marinbuild") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise WorkspaceError(f"{pyproject}: [tool.marinbuild] must be a table")
    return table


def find_workspace(start_dir: str | os.PathLike[str] = ".") -> Workspace:
    """The nearest ancestor of ``start_dir`` (itself included) whose ``pyproject.toml`` has ``[tool.marinbuild]``."""
    start = Path(start_dir).resolve()
    if start.is_file():
        start = start.parent
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            config = _read_config(pyproject)
            if config is not None:
                return Workspace(folder, config)
    raise WorkspaceError(
        f"no marinbuild workspace found at or above {start}: "
        "add a [tool.marinbuild] table to the pyproject.toml at the workspace root"
    )
