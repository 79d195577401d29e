"""Evaluating dialect files: BUILD files (declaring targets) and loadable ``.bzl``-style modules.

A file's ``load()`` statements are resolved before it runs (so a missing file, symbol or a
load cycle is reported at the ``load()`` line); then its compiled code runs with the
restricted builtins. A loaded module's top-level values are frozen when it finishes, and
it is evaluated once per ``Evaluator``. Python exceptions escaping a file become
``BuildFileError`` at the innermost dialect line, with the calling lines appended.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from types import FunctionType, TracebackType
from typing import TYPE_CHECKING, Any

from marinbuild.core.labels import Label, LabelError, parse_label
from marinbuild.load.builtins import SAFE_BUILTINS, base_globals
from marinbuild.load.codecache import compile_file
from marinbuild.load.context import (
    PackageContext,
    code_position,
    dialect_files,
    package_scope,
    register_dialect_file,
)
from marinbuild.load.dialect import CompiledFile
from marinbuild.load.errors import BuildFileError, Location
from marinbuild.load.frozen import FrozenValueError, freeze, freeze_function
from marinbuild.load.repos import LOADABLE_SUFFIXES, UnknownRepositoryError, resolve_load
from marinbuild.load.rules import RuleType
from marinbuild.load.target import Target
from marinbuild.load.trusted import RulesModuleError, import_rules_module, module_exports
from marinbuild.load.workspace import BUILD_FILE, Workspace

if TYPE_CHECKING:
    from marinbuild.load.prefetch import CompileHelper

__all__ = ["Evaluator", "error_from_exception"]

_OWN_CODE = str(Path(__file__).resolve().parent) + os.sep


class Evaluator:
    """Evaluates the BUILD files and loadable modules of one workspace, caching modules."""

    def __init__(
        self, workspace: Workspace, repo_dirs: Mapping[str, Path] | None = None, cache_dir: Path | None = None
    ) -> None:
        self.workspace = workspace
        self.cache_dir = cache_dir
        self.repo_dirs = dict(repo_dirs or {})
        self._modules: dict[Path, dict[str, Any]] = {}
        self._by_text: dict[tuple[str, str], dict[str, Any]] = {}  # (load() label, its package or "") -> exports
        self._root = str(workspace.root)
        self._loading: list[tuple[Path, str]] = []
        self.helper: CompileHelper | None = None  # compiles BUILD files in a second process meanwhile (prefetch)

    def build_file_paths(self, package: str) -> tuple[str, str]:
        """``package``'s BUILD file: its path (the compiled code's filename) and its path in messages."""
        if package:  # what workspace.build_file() and display() give, without making Paths
            return os.path.join(self._root, package, BUILD_FILE), f"{package}/{BUILD_FILE}"
        return os.path.join(self._root, BUILD_FILE), BUILD_FILE

    def loaded_files(self) -> list[Path]:
        """The files ``load()``ed so far (loadable modules and rules modules)."""
        return list(self._modules)

    def eval_build_file(self, package: str) -> dict[str, Target]:
        """Evaluate ``package``'s BUILD.marin; its targets by name, in declaration order."""
        path, display = self.build_file_paths(package)
        compiled = compile_file(path, display, self.cache_dir, self.helper)
        register_dialect_file(compiled.path, display)
        loads = self._resolve_loads(compiled, package)
        scope = base_globals(f"//{package}:{BUILD_FILE}", loads)
        ctx = PackageContext(package, self.workspace.package_dir(package), compiled.path, compiled.display)
        with package_scope(ctx):
            _run(compiled, scope, self.workspace)
        return ctx.targets

    def _compile(self, path: Path) -> CompiledFile:
        display = self.workspace.display(path)
        compiled = compile_file(path, display, self.cache_dir)
        register_dialect_file(compiled.path, display)
        return compiled

    def _resolve_loads(self, compiled: CompiledFile, package: str) -> dict[str, dict[str, Any]]:
        resolved: dict[str, dict[str, Any]] = {}
        for stmt in compiled.loads:
            location = Location(compiled.display, stmt.line, stmt.col)
            exports = self.load_module(stmt.label, package, location)
            for _local, symbol in stmt.symbols:
                if symbol not in exports:
                    close = difflib.get_close_matches(symbol, list(exports), n=1)
                    hint = f" (did you mean {close[0]!r}?)" if close else ""
                    raise BuildFileError.at(location, f"load(): {stmt.label!r} has no public symbol {symbol!r}{hint}")
            resolved[stmt.label] = exports
        return resolved

    def load_module(self, text: str, package: str, location: Location) -> dict[str, Any]:
        """The exports of the file ``text`` names (relative to ``package``), loading it if needed."""
        key = (text, "" if text.startswith(("//", "@")) else package)  # absolute labels: one entry for all
        known = self._by_text.get(key)
        if known is not None:
            return known
        try:
            label = parse_label(text, package)
        except LabelError as exc:
            raise BuildFileError.at(location, f"load(): {exc}") from None
        if not label.name.endswith(LOADABLE_SUFFIXES):
            raise BuildFileError.at(
                location, f"load(): cannot load {text!r}: only {', '.join(LOADABLE_SUFFIXES)} files can be loaded"
            )
        try:
            where = resolve_load(label, self.workspace.root, self.repo_dirs)
        except UnknownRepositoryError as exc:
            raise BuildFileError.at(location, f"load(): {exc}") from None
        path = where.path
        cached = self._modules.get(path)
        if cached is not None:
            self._by_text[key] = cached
            return cached
        for i, (loading, _name) in enumerate(self._loading):
            if loading == path:
                chain = " -> ".join([n for _p, n in self._loading[i:]] + [str(label)])
                raise BuildFileError.at(location, f"load cycle: {chain}")
        if not path.is_file():
            raise BuildFileError.at(
                location, f"load(): cannot load '{label}': file {self.workspace.display(path)} does not exist"
            )
        self._loading.append((path, str(label)))
        try:
            if where.trusted_root is not None:
                try:
                    module = import_rules_module(path, where.trusted_root, where.module_parts, str(label))
                except RulesModuleError as exc:
                    raise BuildFileError.at(location, _rules_error_text(exc, self.workspace)) from None
                exports = {k: freeze(v) for k, v in module_exports(module).items()}
            else:
                exports = self._eval_module(path, label)
        finally:
            self._loading.pop()
        self._modules[path] = self._by_text[key] = exports
        return exports

    def _eval_module(self, path: Path, label: Label) -> dict[str, Any]:
        compiled = self._compile(path)
        loads = self._resolve_loads(compiled, label.package)
        scope = base_globals(str(label), loads)
        with package_scope(None):
            _run(compiled, scope, self.workspace)
        for key, value in scope.items():
            if key.startswith("__"):
                continue
            scope[key] = frozen = freeze(value)
            if isinstance(frozen, FunctionType):
                freeze_function(frozen)
            elif isinstance(frozen, RuleType):
                frozen.bind(key, str(label))
        return {k: v for k, v in scope.items() if not k.startswith("_")}


def _rules_error_text(exc: RulesModuleError, workspace: Workspace) -> str:
    text = str(exc)
    if exc.path is not None:
        text += f" (at {workspace.display(exc.path)}" + (f":{exc.line})" if exc.line else ")")
    return text


def _run(compiled: CompiledFile, scope: dict[str, Any], workspace: Workspace) -> None:
    try:
        exec(compiled.code, scope)
    except BuildFileError:
        raise
    except Exception as exc:
        raise error_from_exception(exc, workspace) from None


def error_from_exception(exc: Exception, workspace: Workspace | None = None) -> BuildFileError:
    """A ``BuildFileError`` at the innermost dialect line of ``exc``'s traceback."""
    files = dialect_files()
    dialect: list[TracebackType] = []
    last: TracebackType | None = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename in files:
            dialect.append(tb)
        last = tb
        tb = tb.tb_next
    message = _describe(exc, dialect[-1] if dialect else None)
    if last is not None and last.tb_frame.f_code.co_filename not in files:
        filename = last.tb_frame.f_code.co_filename
        if not filename.startswith(_OWN_CODE):  # point into rules modules, not into the loader itself
            shown = workspace.display(filename) if workspace is not None else filename
            message += f" (raised in {shown}:{last.tb_lineno})"
    if not dialect:
        return BuildFileError("<unknown>", 1, 1, message)
    locations = [_tb_location(t, files) for t in dialect]
    callers = [str(loc) for loc in reversed(locations[:-1])]
    if callers:
        message += "; called from " + ", ".join(callers)
    return BuildFileError.at(locations[-1], message)


def _tb_location(tb: TracebackType, files: dict[str, str]) -> Location:
    code = tb.tb_frame.f_code
    line, col = code_position(code, tb.tb_lasti)
    return Location(files[code.co_filename], line or tb.tb_lineno, (col or 0) + 1)


def _describe(exc: Exception, tb: TracebackType | None) -> str:
    if isinstance(exc, NameError) and getattr(exc, "name", None):
        name = exc.name  # type: ignore[attr-defined]
        known: list[str] = list(SAFE_BUILTINS)
        if tb is not None:
            known += [k for k in tb.tb_frame.f_globals if not k.startswith("__")]
            known += list(tb.tb_frame.f_locals)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"unknown name {name!r}: it is not a builtin, not defined in this file and not load()ed{hint}"
    if isinstance(exc, FrozenValueError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
