"""``marinbuild info [KEY]``: facts about this workspace and installation, as ``bazel info`` prints them.

``workspace_info(workspace, settings, prefix_flag)`` returns an ordered mapping of key to string value, computed without
loading BUILD files, starting Ray or touching the prefix."""

from __future__ import annotations

import os
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any


def prefix_source(workspace: Any, prefix_flag: str | None) -> str:
    """Where the prefix came from, in ``Settings.resolve``'s order: flag, ``$MARIN_PREFIX``, pyproject, default."""
    if prefix_flag:
        return "--prefix"
    if os.environ.get("MARIN_PREFIX"):
        return "$MARIN_PREFIX"
    if workspace.config.get("prefix"):
        return f"[tool.marinbuild] prefix in {workspace.root / 'pyproject.toml'}"
    return "default (no --prefix, $MARIN_PREFIX or [tool.marinbuild] prefix)"


def installed_version() -> str:
    try:
        return version("marinbuild")
    except PackageNotFoundError:
        return "unknown"


def workspace_info(workspace: Any, settings: Any, prefix_flag: str | None = None) -> dict[str, str]:
    cache = workspace.cache_dir
    prefix = settings.prefix
    return {
        "workspace": str(workspace.root),
        "prefix": prefix,
        "prefix_source": prefix_source(workspace, prefix_flag),
        "backend": settings.backend,
        "ray_address": settings.ray_address
        or ("none (a local Ray on 127.0.0.1)" if settings.backend == "ray" else "none"),
        "output_base": str(cache),
        "stat_cache": str(workspace.stat_cache_path),
        "ray_log": str(cache / "logs" / "ray.log"),
        "experiments": prefix + "/experiments",
        "version": installed_version(),
        "python": f"{sys.executable} ({sys.version.split()[0]})",
    }
