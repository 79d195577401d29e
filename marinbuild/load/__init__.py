"""Loading BUILD.marin files into targets: the dialect, rule types, workspaces and the loader.

Rules modules write ``from marinbuild.load import attr, rule``; the engine and the CLI use
``find_workspace``, ``Loader`` (or ``load_workspace``/``load_packages``/``load_patterns``)
and the resulting ``LoadedWorkspace`` of ``Target``s.
"""

from marinbuild.load.attrs import Attr, attr
from marinbuild.load.builtins import Struct
from marinbuild.load.errors import BuildFileError, Location, WorkspaceError
from marinbuild.load.frozen import FrozenDict, FrozenList, FrozenValueError
from marinbuild.load.loader import LoadedWorkspace, Loader, load_packages, load_patterns, load_workspace
from marinbuild.load.repos import marinbuild_rules_dir
from marinbuild.load.rules import RuleType, rule
from marinbuild.load.sources import StatCache, hash_source_file
from marinbuild.load.target import Target
from marinbuild.load.workspace import BUILD_FILE, Workspace, find_workspace

__all__ = [
    "BUILD_FILE",
    "Attr",
    "BuildFileError",
    "FrozenDict",
    "FrozenList",
    "FrozenValueError",
    "LoadedWorkspace",
    "Loader",
    "Location",
    "RuleType",
    "StatCache",
    "Struct",
    "Target",
    "Workspace",
    "WorkspaceError",
    "attr",
    "find_workspace",
    "hash_source_file",
    "load_packages",
    "load_patterns",
    "load_workspace",
    "marinbuild_rules_dir",
    "rule",
]
