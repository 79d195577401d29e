"""The BUILD.marin dialect: parse Python syntax, reject what Starlark forbids, compile.

Files are parsed with ``ast``, checked once, lightly rewritten (every ``def`` and
``lambda`` is wrapped by the recursion guard) and compiled with CPython's ``compile()``.
Caching the result is ``codecache``'s job.

Allowed: assignments, ``def`` (no recursion, checked at run time), ``lambda``, ``if``,
``for`` (also at the top level, unlike Starlark's BUILD files), comprehensions, f-strings,
``del``, ``load()`` at the top level. Rejected, with a ``path:line:col`` error saying what
to do instead: ``import``, ``while``, ``global``/``nonlocal``, ``class``, ``try``, ``with``,
``raise``, ``assert``, ``match``, ``yield``, ``async``/``await``, names starting with
``__``, attributes starting with ``_`` and the interpreter-escape builtins (``open``,
``exec``, ``eval``, ``getattr``...). This keeps BUILD files hermetic and deterministic; it
is not a sandbox against hostile code.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from types import CodeType

from marinbuild.load.errors import BuildFileError

__all__ = ["CHECKER_VERSION", "GUARD_NAME", "CompiledFile", "LoadStatement", "compile_source"]

CHECKER_VERSION = 1
"""Bump whenever the checks or the rewrite change, so that cached compiled files are redone."""

GUARD_NAME = "__marin_guard__"
"""Global name of the recursion guard the rewrite wraps around every function."""

_FORBIDDEN_STATEMENTS: dict[type[ast.AST], str] = {
    ast.Import: '\'import\' is not allowed in BUILD files: use load("//rules:file.py", "symbol") to use '
    "symbols from another file; code that needs real Python belongs in a rules/ module",
    ast.ImportFrom: '\'from ... import\' is not allowed in BUILD files: use load("//rules:file.py", "symbol") '
    "to use symbols from another file; code that needs real Python belongs in a rules/ module",
    ast.While: "'while' loops are not allowed (loading must terminate): iterate with 'for x in range(n)'",
    ast.Global: "'global' is not allowed: return values from functions instead",
    ast.Nonlocal: "'nonlocal' is not allowed: return values from functions instead",
    ast.ClassDef: "classes cannot be defined in BUILD files: define them in a rules/ module, or use struct() or dict",
    ast.Try: "'try' is not allowed: errors while loading are fatal; report one with fail(\"message\")",
    ast.TryStar: "'try' is not allowed: errors while loading are fatal; report one with fail(\"message\")",
    ast.With: "'with' is not allowed in BUILD files (they do no I/O)",
    ast.AsyncWith: "'async with' is not allowed in BUILD files",
    ast.AsyncFor: "'async for' is not allowed in BUILD files",
    ast.AsyncFunctionDef: "'async def' is not allowed in BUILD files",
    ast.Await: "'await' is not allowed in BUILD files",
    ast.Yield: "'yield' is not allowed: return a list instead",
    ast.YieldFrom: "'yield from' is not allowed: return a list instead",
    ast.Raise: "'raise' is not allowed: use fail(\"message\")",
    ast.Assert: "'assert' is not allowed: use 'if not condition: fail(\"message\")'",
    ast.Match: "'match' is not allowed: use if/elif",
}

_FORBIDDEN_NAMES: dict[str, str] = {
    "open": "BUILD files must be hermetic and cannot read files; list files with glob() and read them in a rule",
    "exec": "BUILD files cannot run dynamic code",
    "eval": "BUILD files cannot run dynamic code",
    "compile": "BUILD files cannot run dynamic code",
    "getattr": "use attribute syntax (x.field) or a dict",
    "setattr": "values are immutable once created; build a new dict or struct()",
    "delattr": "values are immutable once created",
    "globals": "introspection is not available in BUILD files",
    "locals": "introspection is not available in BUILD files",
    "vars": "introspection is not available in BUILD files",
    "dir": "introspection is not available in BUILD files",
    "input": "BUILD files cannot read input",
    "breakpoint": "debuggers are not available while loading; use print() (it goes to the log)",
    "exit": 'use fail("message") to stop loading with an error',
    "quit": 'use fail("message") to stop loading with an error',
    "help": "read the rule's doc= in its rules module instead",
    "memoryview": "BUILD files only handle plain values",
    "type": "BUILD files only handle plain values; compare values directly instead",
    "object": "BUILD files only handle plain values; use struct() for records",
}

_FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "ag_frame", "ag_code",
        "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "tb_frame", "tb_next",
        "co_code", "mro", "format_map",
    }
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class LoadStatement:
    """A top-level ``load(label, *names, **aliases)``: ``symbols`` maps local name -> exported name."""

    label: str
    symbols: tuple[tuple[str, str], ...]
    line: int
    col: int


@dataclass(frozen=True, slots=True)
class CompiledFile:
    """A checked and compiled dialect file."""

    path: str
    display: str
    code: CodeType
    loads: tuple[LoadStatement, ...]


def compile_source(source: str | bytes, path: str, display: str | None = None) -> CompiledFile:
    """Check and compile ``source``; ``path`` becomes the code's filename, ``display`` the one in errors."""
    shown = display if display is not None else path
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        line = exc.lineno or 1
        col = exc.offset or 1
        raise BuildFileError(shown, line, col, f"syntax error: {exc.msg}") from None
    except ValueError as exc:  # e.g. null bytes
        raise BuildFileError(shown, 1, 1, f"cannot parse: {exc}") from None
    checker = _Checker(shown)
    loads = checker.check(tree)
    if checker.functions:
        tree = _GuardInserter().visit(tree)
        ast.fix_missing_locations(tree)
    code = compile(tree, path, "exec", dont_inherit=True)  # from the tree: twice as fast as re-parsing
    return CompiledFile(path, shown, code, tuple(loads))


class _Checker:
    """Walks a module once, raising ``BuildFileError`` at the first forbidden construct."""

    def __init__(self, display: str) -> None:
        self.display = display
        self.functions = False

    def error(self, node: ast.AST, message: str) -> BuildFileError:
        return BuildFileError(self.display, getattr(node, "lineno", 1), getattr(node, "col_offset", 0) + 1, message)

    def check(self, tree: ast.Module) -> list[LoadStatement]:
        loads: list[LoadStatement] = []
        load_calls: set[int] = set()
        for stmt in tree.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                func = stmt.value.func
                if isinstance(func, ast.Name) and func.id == "load":
                    loads.append(self._load_statement(stmt.value))
                    load_calls.add(id(func))
        bound: set[str] = set()
        escapes: list[ast.Name] = []
        forbidden = _FORBIDDEN_STATEMENTS
        for node in _nodes(tree):
            cls = type(node)
            if cls is ast.Name:
                name = node.id  # type: ignore[attr-defined]
                if name.startswith("__"):
                    raise self.error(node, f"name {name!r} is reserved: names starting with '__' are not allowed")
                if name in _FORBIDDEN_NAMES:
                    if type(node.ctx) is ast.Load:  # type: ignore[attr-defined]
                        escapes.append(node)  # type: ignore[arg-type]
                    else:
                        bound.add(name)
                elif name == "load" and id(node) not in load_calls:
                    raise self.error(
                        node, 'load() must be a statement at the top level of the file, e.g. load("//rules:x.py", "y")'
                    )
            elif cls is ast.Attribute:
                attr = node.attr  # type: ignore[attr-defined]
                if attr.startswith("_"):
                    raise self.error(
                        node, f"attribute {attr!r} is private: attributes starting with '_' are not allowed"
                    )
                if attr in _FORBIDDEN_ATTRIBUTES:
                    raise self.error(node, f"attribute {attr!r} is not allowed in BUILD files")
            elif cls is ast.FunctionDef or cls is ast.Lambda:
                self.functions = True
                if cls is ast.FunctionDef:
                    name = node.name  # type: ignore[attr-defined]
                    if name.startswith("__"):
                        raise self.error(node, f"function name {name!r} is reserved")
                    bound.add(name)
            elif cls is ast.arg:
                name = node.arg  # type: ignore[attr-defined]
                if name.startswith("__"):
                    raise self.error(node, f"parameter name {name!r} is reserved")
                bound.add(name)
            elif cls in forbidden:
                raise self.error(node, forbidden[cls])
        for node in sorted(escapes, key=lambda n: (n.lineno, n.col_offset)):
            if node.id not in bound:
                raise self.error(node, f"{node.id}() is not available in BUILD files: {_FORBIDDEN_NAMES[node.id]}")
        return loads

    def _load_statement(self, call: ast.Call) -> LoadStatement:
        if not call.args:
            raise self.error(call, 'load() needs a label and at least one symbol, e.g. load("//rules:x.py", "y")')
        label_node = call.args[0]
        if not (isinstance(label_node, ast.Constant) and isinstance(label_node.value, str)):
            raise self.error(label_node, "load(): the label must be a string literal")
        symbols: list[tuple[str, str]] = []
        for arg in call.args[1:]:
            if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                raise self.error(arg, "load(): symbol names must be string literals")
            symbols.append((arg.value, arg.value))
        for kw in call.keywords:
            if kw.arg is None:
                raise self.error(kw.value, "load(): '**' is not allowed; write alias = \"symbol\"")
            if not (isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str)):
                raise self.error(kw.value, "load(): symbol names must be string literals")
            symbols.append((kw.arg, kw.value.value))
        if not symbols:
            raise self.error(call, 'load() needs at least one symbol to load, e.g. load("//rules:x.py", "y")')
        for local, remote in symbols:
            if not remote.isidentifier():
                raise self.error(call, f"load(): {remote!r} is not a valid symbol name")
            if remote.startswith("_"):
                raise self.error(call, f"load(): symbol {remote!r} is private (starts with '_') and cannot be loaded")
            if local.startswith("__"):
                raise self.error(call, f"load(): local name {local!r} is reserved")
        return LoadStatement(label_node.value, tuple(symbols), call.lineno, call.col_offset + 1)


def _nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` in source order (pre-order); leaner than ``ast.walk``."""
    stack = [tree]
    pop = stack.pop
    push = stack.append
    node_type = ast.AST
    while stack:
        node = pop()
        yield node
        children: list[ast.AST] = []
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                children.extend(x for x in value if isinstance(x, node_type))
            elif isinstance(value, node_type):
                children.append(value)
        children.reverse()
        for child in children:
            push(child)


class _GuardInserter(ast.NodeTransformer):
    """Wraps every ``def`` (innermost decorator) and ``lambda`` with the recursion guard."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        guard = ast.copy_location(ast.Name(GUARD_NAME, ast.Load()), node)
        node.decorator_list.append(guard)
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        self.generic_visit(node)
        func = ast.copy_location(ast.Name(GUARD_NAME, ast.Load()), node)
        return ast.copy_location(ast.Call(func, [node], []), node)
