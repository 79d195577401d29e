"""Where ``load()`` labels live: workspace files, and the ``@marinbuild`` repository of shipped rules
(``@marinbuild//rules:python.py``). ``.py`` files under a ``rules/`` folder at the top of a repository are trusted
Python modules; the other loadable files are Starlark ``.star`` files."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from marinbuild.core.labels import Label

LIBRARY_SUFFIX = ".star"  # of the Starlark files BUILD files load()
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent  # .../marinbuild
_SHIPPED = _PACKAGE_ROOT / "_rules" if (_PACKAGE_ROOT / "_rules").is_dir() else _PACKAGE_ROOT.parent / "rules"


class UnknownRepositoryError(LookupError):
    """A label names a repository other than the workspace and ``@marinbuild``."""


def marinbuild_rules_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """``@marinbuild//rules``'s folder: ``override``, else the package's ``_rules``, else the checkout's ``rules/``."""
    return Path(override).resolve() if override is not None else _SHIPPED


@dataclass(frozen=True, slots=True)
class LoadTarget:
    """The file a ``load()`` label names; ``trusted_root`` is set for trusted rules modules."""

    path: Path
    trusted_root: Path | None  # the rules/ folder it is imported from
    module_parts: tuple[str, ...] = ()  # its dotted path below trusted_root


def _split_rules(package: str) -> tuple[str, ...] | None:
    parts = package.split("/")
    return tuple(parts[1:]) if parts[0] == "rules" else None


def resolve_load(label: Label, workspace_root: Path, repo_dirs: Mapping[str, Path] | None = None) -> LoadTarget:
    """The file ``label`` names and whether it is a trusted rules module; ``repo_dirs`` overrides repository folders."""
    overrides = repo_dirs or {}
    below = _split_rules(label.package)
    if label.repo:
        if label.repo != "marinbuild":
            raise UnknownRepositoryError(f"unknown repository '@{label.repo}' (the only one known is @marinbuild)")
        if below is None:
            raise UnknownRepositoryError(
                f"'{label}': the @marinbuild repository only has the rules package ('@marinbuild//rules:<file>.py')"
            )
        rules_dir = marinbuild_rules_dir(overrides.get("marinbuild"))
        path = rules_dir.joinpath(*below, *label.name.split("/"))
        if not label.name.endswith(".py"):
            return LoadTarget(path, None)
        return LoadTarget(path, rules_dir, (*below, *label.name[: -len(".py")].split("/")))
    path = workspace_root.joinpath(*(label.package.split("/") if label.package else ()), *label.name.split("/"))
    if below is not None and label.name.endswith(".py"):
        return LoadTarget(path, workspace_root / "rules", (*below, *label.name[: -len(".py")].split("/")))
    return LoadTarget(path, None)
