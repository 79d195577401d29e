"""Evaluating BUILD files and the ``.star`` files they load, with Starlark (starlark-rust via starlark-pyo3).

A BUILD file is checked (``limits.check_source``), parsed with marinbuild's dialect and evaluated in a fresh module
holding the builtins; its rule calls declare targets in the package (``PackageContext``). ``load()`` goes through a
``FileLoader``: a ``.star`` file is evaluated alike and frozen, once per ``Evaluator``; a ``.py`` under ``rules/`` (or
``@marinbuild``) is imported as trusted Python in the loading process and shown as its rule types and plain values only
(``exposed``). Every error, a budget overrun or a starlark-rust panic included, is a ``BuildFileError`` at
``path:line:col``. The loader's forked child (``child``) uses an ``Evaluator`` on its large-stack thread."""

from __future__ import annotations

import difflib
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import starlark as sl

from marinbuild.core.labels import LabelError, parse_label
from marinbuild.load import limits
from marinbuild.load.context import PackageContext, package_scope
from marinbuild.load.errors import BuildFileError, LocatedLater, Location
from marinbuild.load.exposed import DIALECT, GLOBALS, RulesModule, add_builtins, expose_rules_module
from marinbuild.load.located import forget, from_starlark, remember
from marinbuild.load.repos import LIBRARY_SUFFIX, UnknownRepositoryError, resolve_load
from marinbuild.load.target import Target
from marinbuild.load.trusted import RulesModuleError, import_rules_module
from marinbuild.load.workspace import BUILD_FILE, Workspace

__all__ = ["Evaluator"]

_MISSING_SYMBOL = re.compile(r"Module has no symbol `([^`]*)`")


class _Loaded:
    """A loaded file as ``load()`` sees it: the frozen module and its loadable names."""

    __slots__ = ("frozen", "hidden", "names")

    def __init__(self, frozen: sl.FrozenModule, names: list[str], hidden: Iterable[str] = ()) -> None:
        self.frozen = frozen
        self.names = names
        self.hidden = list(hidden)


class Evaluator:
    """Evaluates the BUILD files and loaded files of one workspace, caching loaded files."""

    def __init__(self, workspace: Workspace, repo_dirs: Mapping[str, Path] | None = None) -> None:
        self.workspace = workspace
        self.repo_dirs = dict(repo_dirs or {})
        self.budget = limits.budget_seconds(workspace.config)
        self.memory = limits.memory_bytes(workspace.config)
        self._modules: dict[Path, _Loaded | BuildFileError] = {}
        self._root = str(workspace.root)
        self._loading: list[tuple[Path, str]] = []
        self._deadline = 0.0
        self._memory_stop: int | None = None  # the address space past which the BUILD file evaluated stops
        self._stopped_by = ""

    def build_file_paths(self, package: str) -> tuple[str, str]:
        """``package``'s BUILD file: its path and its path in messages."""
        if package:
            return os.path.join(self._root, package, BUILD_FILE), f"{package}/{BUILD_FILE}"
        return os.path.join(self._root, BUILD_FILE), BUILD_FILE

    def eval_build_file(self, package: str) -> dict[str, Target]:
        """Evaluate ``package``'s BUILD.marin; its targets by name, in declaration order."""
        path, display = self.build_file_paths(package)
        source = _read(path, display)
        ctx = PackageContext(package, self.workspace.package_dir(package), path, display)
        self._deadline = time.monotonic() + self.budget
        self._memory_stop = limits.cap_memory(self.memory)
        self._stopped_by = ""
        with package_scope(ctx):
            self._run(display, source, package)
        return ctx.targets

    def _cancelled(self) -> bool:
        """Whether to stop: past the time budget or the memory allowance (a read of ``/proc``: about 2 us)."""
        if time.monotonic() > self._deadline:
            self._stopped_by = "time"
            return True
        if self._memory_stop is not None:
            used = limits.memory_used()
            if used is not None and used > self._memory_stop:
                self._stopped_by = "memory"
                return True
        return False

    def _stop_message(self) -> str:
        return limits.MEMORY_MESSAGE if self._stopped_by == "memory" else limits.time_message(self.budget)

    def _run(self, display: str, source: str, package: str) -> sl.Module:
        """Parse and evaluate one file in a new module; ``package`` resolves its relative ``load()`` labels."""
        fallback = Location(display, 1, 1)
        forget()
        try:
            ast = sl.parse(display, source, DIALECT)
        except sl.StarlarkError as exc:
            raise _at_end_if_unplaced(from_starlark(str(exc), fallback, self._root), source) from None
        try:
            module = sl.Module()
            add_builtins(module, source)
            loader = sl.FileLoader(self._file_loader(package))
            options = sl.EvalOptions(check_cancelled=self._cancelled, max_callstack_size=limits.MAX_CALL_DEPTH)
            sl.eval_with(options, module, ast, GLOBALS, loader)
        except sl.StarlarkError as exc:
            error = from_starlark(str(exc), fallback, self._root, self._stop_message())
            missing = _MISSING_SYMBOL.match(error.message)
            if missing is not None:
                error = self._missing_symbol(error, missing.group(1), ast, package)
            raise error from None
        except BuildFileError:
            raise
        except BaseException as exc:  # a panic inside starlark-rust (pyo3 PanicException), or MemoryError
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            if isinstance(exc, MemoryError) or "out of memory" in str(exc):
                raise BuildFileError.at(
                    fallback,
                    "evaluation ran out of memory: a value in this file grew too large at once (a string or "
                    "list doubled in a loop?); see 'Limits' in docs/build-files.md",
                ) from None
            raise BuildFileError.at(fallback, f"the Starlark evaluator failed on this file: {exc}") from None
        return module

    def _missing_symbol(self, error: BuildFileError, name: str, ast: sl.AstModule, package: str) -> BuildFileError:
        """``error`` (a ``load()`` of a name the file does not export) saying which file and what it has."""
        for stmt in ast.loads():
            if name not in stmt.symbols.values():
                continue
            try:
                loaded = self._load(stmt.module_id, package)
            except BaseException:
                break
            if name in loaded.hidden:
                text = (
                    f"load(): {stmt.module_id!r} does not export {name!r}: a rules module exports only its rule types "
                    "and plain values (strings, numbers, lists, dicts)"
                )
            else:
                text = f"load(): {stmt.module_id!r} has no symbol {name!r}{did_you_mean(name, loaded.names)}"
            forget()
            return BuildFileError(error.path, error.line, error.col, text)
        return error

    def _file_loader(self, package: str) -> Callable[[str], sl.FrozenModule]:
        def load(text: str) -> sl.FrozenModule:
            try:
                return self._load(text, package).frozen
            except BaseException as exc:
                remember(exc)
                raise

        return load

    def _load(self, text: str, package: str) -> _Loaded:
        """The module a ``load()`` of ``text`` (in ``package``) gives, evaluating or importing it if needed."""
        try:
            label = parse_label(text, package)
        except LabelError as exc:
            raise _Unlocated(f"load(): {exc}") from None
        if not label.name.endswith((LIBRARY_SUFFIX, ".py")):
            raise _Unlocated(
                f"load(): cannot load {text!r}: Starlark files loaded by BUILD files end in {LIBRARY_SUFFIX}, "
                "and rules modules are .py files under rules/"
            )
        try:
            where = resolve_load(label, self.workspace.root, self.repo_dirs)
        except UnknownRepositoryError as exc:
            raise _Unlocated(f"load(): {exc}") from None
        path = where.path
        if label.name.endswith(".py") and where.trusted_root is None:
            raise _Unlocated(
                f"load(): cannot load {text!r}: .py files are rules modules and must be under a top-level rules/ "
                f"folder; Starlark files end in {LIBRARY_SUFFIX}"
            )
        cached = self._modules.get(path)
        if isinstance(cached, BuildFileError):
            raise cached
        if cached is not None:
            return cached
        for i, (loading, _name) in enumerate(self._loading):
            if loading == path:
                chain = " -> ".join([n for _p, n in self._loading[i:]] + [str(label)])
                raise _Unlocated(f"load cycle: {chain}")
        if not path.is_file():
            raise _Unlocated(f"load(): cannot load '{label}': file {self.workspace.display(path)} does not exist")
        self._loading.append((path, str(label)))
        try:
            if where.trusted_root is not None:
                try:
                    module = import_rules_module(path, where.trusted_root, where.module_parts, str(label))
                except RulesModuleError as exc:
                    raise _Unlocated(_rules_error_text(exc, self.workspace)) from None
                exposed: RulesModule = expose_rules_module(module, str(label))
                loaded = _Loaded(exposed.frozen, exposed.names, exposed.hidden)
            else:
                display = self.workspace.display(path)
                try:
                    source = _read(str(path), display)
                    with package_scope(None):
                        starlark_module = self._run(display, source, label.package)
                    loaded = _Loaded(starlark_module.freeze(), [])
                except BuildFileError as exc:
                    self._modules[path] = exc
                    raise
        finally:
            self._loading.pop()
        self._modules[path] = loaded
        return loaded


def _at_end_if_unplaced(error: BuildFileError, source: str) -> BuildFileError:
    """A syntax error Starlark places at 1:1 when the file ends too early: placed at the end of the text instead."""
    if (error.line, error.col) != (1, 1) or "unexpected" not in error.message:
        return error
    lines = source.rstrip().splitlines() or [""]
    return BuildFileError(error.path, len(lines), len(lines[-1]) + 1, error.message)


class _Unlocated(LocatedLater):
    """A ``load()`` problem; located at the ``load`` statement Starlark names."""


def _rules_error_text(exc: RulesModuleError, workspace: Workspace) -> str:
    text = str(exc)
    if exc.path is not None:
        text += f" (at {workspace.display(exc.path)}" + (f":{exc.line})" if exc.line else ")")
    return text


def _read(path: str, display: str) -> str:
    try:
        with open(path, "rb") as f:  # read(n) allocates n bytes first: the size it has, not the most it may have
            data = f.read(min(os.fstat(f.fileno()).st_size, limits.MAX_FILE_BYTES) + 1)
    except OSError as exc:
        raise BuildFileError(display, 1, 1, f"cannot read the file: {exc.strerror or exc}") from None
    return limits.check_source(data, display)


def did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
