"""Loading BUILD.marin files (Starlark) into targets: rule types, workspaces and the loader. Rules modules
write ``from marinbuild.load import attr, rule``; the engine and the CLI use ``find_workspace`` and ``Loader``."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marinbuild.load.attrs import Attr, attr
    from marinbuild.load.builtins import Struct
    from marinbuild.load.errors import BuildFileError, Location, WorkspaceError
    from marinbuild.load.frozen import FrozenDict, FrozenValueError
    from marinbuild.load.loader import LoadedWorkspace, Loader, load_packages, load_patterns, load_workspace
    from marinbuild.load.repos import marinbuild_rules_dir
    from marinbuild.load.rules import RuleType, rule
    from marinbuild.load.sources import StatCache, hash_source_file
    from marinbuild.load.target import Target
    from marinbuild.load.workspace import BUILD_FILE, Workspace, find_workspace

_HOME = {
    "Attr": "attrs", "attr": "attrs", "Struct": "builtins", "BuildFileError": "errors", "Location": "errors",
    "WorkspaceError": "errors", "FrozenDict": "frozen", "FrozenValueError": "frozen",
    "LoadedWorkspace": "loader", "Loader": "loader", "load_packages": "loader", "load_patterns": "loader",
    "load_workspace": "loader", "marinbuild_rules_dir": "repos", "RuleType": "rules", "rule": "rules",
    "StatCache": "sources", "hash_source_file": "sources", "Target": "target", "BUILD_FILE": "workspace",
    "Workspace": "workspace", "find_workspace": "workspace",
}  # fmt: skip
"""Where each public name lives: imported on first use (PEP 562). Every ``marinbuild.load.*`` import runs this
file first, and plain imports here would load starlark (the loader's) with ``load.workspace``, which the
settings resolution and the CLI's start import."""


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'marinbuild.load' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"marinbuild.load.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "BUILD_FILE", "Attr", "BuildFileError", "FrozenDict", "FrozenValueError", "LoadedWorkspace", "Loader", "Location",
    "RuleType", "StatCache", "Struct", "Target", "Workspace", "WorkspaceError", "attr", "find_workspace",
    "hash_source_file", "load_packages", "load_patterns", "load_workspace", "marinbuild_rules_dir", "rule"
]  # fmt: skip
