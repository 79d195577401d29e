"""Importing trusted rules modules (real Python under a ``rules/`` folder) and what they export.

Each rules folder becomes a synthetic package (``_marinbuild_rules_<hash>``) whose ``__path__`` is the folder, so its
modules import each other and never clash with another folder's. Modules are imported once, cached by ``(path, mtime_ns,
size)``; rule types are named when imported. The BUILD-evaluating child (``child``) never imports one: it asks the
parent to (``ASK_PARENT``, ending the child), and the parent forks a child that has it or raises its import error
(``_FAILED``, kept for the load). Rule implementations thus live in the parent only."""

from __future__ import annotations

import hashlib
import importlib
import sys
import types
from collections.abc import Callable
from pathlib import Path

from marinbuild.load.rules import RuleType

__all__ = ["ASK_PARENT", "RulesModuleError", "forget_failed_imports", "import_rules_module"]

# Process-wide on purpose: rules modules are imported into ``sys.modules``, which is per process; these remember
# the package names given to their folders and each module with the stat it was imported at.
_PARENTS: dict[Path, str] = {}
_MODULES: dict[Path, tuple[tuple[int, int], types.ModuleType]] = {}
_FAILED: dict[Path, tuple[tuple[int, int], RulesModuleError]] = {}
ASK_PARENT: list[Callable[[Path, Path, tuple[str, ...], str], None]] = []
"""Set in the evaluating child: hands an import's arguments to the parent and ends the child."""


class RulesModuleError(Exception):
    """A rules module could not be imported; ``path``/``line`` point into it when known."""

    def __init__(self, message: str, path: Path | None = None, line: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.line = line


def _parent_package(root: Path) -> str:
    name = _PARENTS.get(root)
    if name is None:
        name = "_marinbuild_rules_" + hashlib.sha256(str(root).encode()).hexdigest()[:12]
        package = types.ModuleType(name, f"marinbuild rules folder {root}")
        package.__path__ = [str(root)]
        package.__package__ = name
        sys.modules[name] = package
        _PARENTS[root] = name
    return name


def import_rules_module(path: Path, root: Path, parts: tuple[str, ...], label: str) -> types.ModuleType:
    """Import the rules module at ``path`` (``parts`` below ``root``) and name its rule types after ``label``."""
    for part in parts:
        if not part.isidentifier():
            raise RulesModuleError(
                f"cannot import {label}: rules module paths must be Python identifiers ({part!r} is not)"
            )
    st = path.stat()
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _MODULES.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    if ASK_PARENT:
        failed = _FAILED.get(path)
        if failed is not None and failed[0] == stamp:
            raise RulesModuleError(str(failed[1]), failed[1].path, failed[1].line)
        ASK_PARENT[0](path, root, parts, label)
    name = _parent_package(root) + "." + ".".join(parts)
    sys.modules.pop(name, None)
    importlib.invalidate_caches()
    try:
        module = importlib.import_module(name)
    except Exception as exc:
        error = _FAILED[path] = (stamp, _import_error(exc, path, label))
        raise error[1] from exc
    for key, value in vars(module).items():
        if isinstance(value, RuleType):
            value.bind(key, label, name)
    _MODULES[path] = (stamp, module)
    return module


def forget_failed_imports() -> None:
    """Forget the imports that failed: a new load tries them again (another module they import may be fixed)."""
    _FAILED.clear()


def _import_error(exc: Exception, path: Path, label: str) -> RulesModuleError:
    line: int | None = getattr(exc, "lineno", None) if isinstance(exc, SyntaxError) else None
    if line is None:
        tb = exc.__traceback__
        while tb is not None:
            if Path(tb.tb_frame.f_code.co_filename) == path:
                line = tb.tb_lineno
            tb = tb.tb_next
    return RulesModuleError(f"error importing rules module {label}: {type(exc).__name__}: {exc}", path, line)
