"""The BUILD.marin dialect: parse Python syntax, reject what Starlark forbids, compile.

Files are parsed with ``ast``, checked once, lightly rewritten (every ``def`` and
``lambda`` is wrapped by the recursion guard) and compiled with CPython's ``compile()``.
Caching the result is ``codecache``'s job.

Most BUILD files are plain data: rule calls, lists, dicts and ``load()`` lines. For them
building Python's AST objects costs three times the compilation itself, so
``compile_source`` first tries a fast path: one pass over the text (``bytes.translate``
blanks every byte that cannot be part of a word, ``split()`` gives the words) proves that
no forbidden keyword, name or ``_``-prefixed identifier occurs anywhere (not even in
strings or dead code), the source is compiled directly, and each ``load()`` statement is
read by a small tokenizer (string literals, names, ``=`` and ``,`` only, as ``ast`` would
read them) and matched against the compiled code (it must be a whole top-level expression
statement). Anything the fast path cannot prove (a ``def``, a ``lambda``, an odd ``load()``,
a syntax error, non-ASCII text...) goes through the full AST check, which is the reference
and the only source of error messages. What remains of a cold load's parsing is CPython's
own ``compile()``: about 60% of a first load of a 10,000-target workspace, which the loader
shares with a forked helper process when there are many files (``prefetch``).

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
import dis
import keyword
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from types import CodeType

from marinbuild.load.errors import BuildFileError

__all__ = ["CHECKER_VERSION", "GUARD_NAME", "CompiledFile", "LoadStatement", "compile_checked", "compile_source"]

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
    fast = _compile_plain(source, path, shown)
    return fast if fast is not None else compile_checked(source, path, shown)


def compile_checked(source: str | bytes, path: str, display: str | None = None) -> CompiledFile:
    """``compile_source`` without the fast path: parse, check the whole AST, rewrite, compile."""
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


_KEYWORDS = ("import while global nonlocal class try with async await yield raise assert match def lambda").split()
_SUSPICIOUS = frozenset(word.encode() for word in (*_KEYWORDS, *_FORBIDDEN_NAMES, *_FORBIDDEN_ATTRIBUTES))
"""Words the fast path cannot prove harmless: the keywords and names the checker looks at."""
_WORDS_ONLY = bytes(c if chr(c).isascii() and (chr(c).isalnum() or c == 95) else 32 for c in range(256))
"""A ``bytes.translate`` table keeping the bytes of ``\\w`` (``[A-Za-z0-9_]``) and making every other byte a
space: ``split()`` of the result gives the words ``re.findall(rb"\\w+", ...)`` would, without a regex."""
_LOAD_CALL = re.compile(rb"""load\((?:[ \t\r\n]+|"[^"\\\n]*"|'[^'\\\n]*'|[A-Za-z][A-Za-z0-9_]*|[=,]|\#[^\n]*)*\)""")
"""A ``load(...)`` call made of string literals, names, ``=`` and ``,`` only (matched where a line starts)."""
_OP = dis.opmap
_LOAD_NAME = _OP["LOAD_NAME"]
_POP_TOP = _OP["POP_TOP"]
_PUSH_NULL = _OP["PUSH_NULL"]
_PREAMBLE = frozenset(_OP[name] for name in ("RESUME", "NOP", "CACHE") if name in _OP)
_CALL_PARTS = frozenset(
    _OP[name] for name in ("CACHE", "LOAD_CONST", "KW_NAMES", "PRECALL", "CALL", "CALL_KW", "PUSH_NULL") if name in _OP
)
"""Opcodes that may sit between ``LOAD_NAME load`` and the ``POP_TOP`` of a plain ``load()`` statement
(their string arguments are checked on the statement's own parse, matched by position)."""


def _compile_plain(source: str | bytes, path: str, shown: str) -> CompiledFile | None:
    """The compiled file if ``source`` is provably plain (see the module docstring), else ``None``."""
    data = source.encode() if isinstance(source, str) else source
    if not data.isascii() or b"\\\n" in data or b"\\\r" in data:
        return None
    text = data.translate(_WORDS_ONLY)  # words kept, all else spaces: also inside strings and comments
    if text[:1] == b"_" or b" _" in text:  # a word starting with '_'
        return None
    words = text.split()
    if not _SUSPICIOUS.isdisjoint(words):
        return None
    try:
        code = compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return None  # the full path reports it
    expected = words.count(b"load")
    if not expected:
        return None if _names_load(code) else CompiledFile(path, shown, code, ())
    spans = _load_spans(data)
    if len(spans) != expected:
        return None  # 'load' used some other way (or inside a string): let the full check judge
    loads = _plain_loads(data, spans, code)
    return None if loads is None else CompiledFile(path, shown, code, loads)


def _load_spans(data: bytes) -> list[re.Match[bytes]]:
    """Every ``_LOAD_CALL`` starting a line, left to right (``^`` in a multi-line pattern, without
    trying the pattern at every position of the file)."""
    spans: list[re.Match[bytes]] = []
    at = data.find(b"load(")
    while at >= 0:
        if at == 0 or data[at - 1] == 10:  # 10: "\n"
            span = _LOAD_CALL.match(data, at)
            if span is not None:
                spans.append(span)
                at = data.find(b"load(", span.end())
                continue
        at = data.find(b"load(", at + 1)
    return spans


def _names_load(code: CodeType) -> bool:
    """Whether ``code`` or a function, lambda or comprehension inside it uses the name ``load``."""
    return "load" in code.co_names or any(map(_names_load, _inner_code(code)))


def _inner_code(code: CodeType) -> list[CodeType]:
    """The code objects among ``code``'s constants (their types compared in C first: usually there are none)."""
    consts = code.co_consts
    return [c for c in consts if type(c) is CodeType] if CodeType in map(type, consts) else []


def _plain_loads(data: bytes, spans: list[re.Match[bytes]], code: CodeType) -> tuple[LoadStatement, ...] | None:
    """The ``load()`` statements of ``spans``, if each is a whole top-level statement of ``code``."""
    if any(map(_names_load, _inner_code(code))):
        return None
    names = code.co_names
    index = names.index("load") if "load" in names else -1
    if not 0 <= index < 256:
        return None
    raw = code.co_code
    size = len(raw) // 2
    ends: list[int] = []  # code unit of the POP_TOP ending each load() statement
    j = 0
    while j < size and raw[2 * j] in _PREAMBLE:
        j += 1
    for _span in spans:  # the loads must be the file's first statements, each straight-line code
        while j < size and raw[2 * j] == _PUSH_NULL:
            j += 1
        if j >= size or raw[2 * j] != _LOAD_NAME or raw[2 * j + 1] != index:
            return None
        j += 1
        while j < size and raw[2 * j] in _CALL_PARTS:
            j += 1
        if j >= size or raw[2 * j] != _POP_TOP:
            return None
        ends.append(j)
        j += 1
    pattern = bytes((_LOAD_NAME, index))
    at = raw.find(pattern, 2 * j)
    while at >= 0:  # no other 'load' in the rest of the code
        if at % 2 == 0:
            return None
        at = raw.find(pattern, at + 1)
    positions = list(islice(code.co_positions(), ends[-1] + 1))
    loads: list[LoadStatement] = []
    for span, end in zip(spans, ends, strict=True):
        line = data.count(b"\n", 0, span.start()) + 1
        text = span.group()
        last_nl = text.rfind(b"\n")
        extent = (line, line + text.count(b"\n"), 0, len(text) if last_nl < 0 else len(text) - last_nl - 1)
        if positions[end] != extent:
            return None  # the call is part of a larger expression
        parsed = _parse_load(text)
        if parsed is None:
            return None  # odd, or an error: the full path judges it
        loads.append(LoadStatement(parsed[0], parsed[1], line, 1))
    return tuple(loads)


_LOAD_TOKEN = re.compile(rb"""([ \t\r\n]+|\#[^\n]*)|"([^"\\\n]*)"|'([^'\\\n]*)'|([A-Za-z][A-Za-z0-9_]*)|([=,])""")
"""The tokens of a ``_LOAD_CALL``'s arguments: blank or comment, "string", 'string', name, ``=`` or ``,``."""


def _parse_load(text: bytes) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """``(label, symbols)`` of a ``_LOAD_CALL`` text, as ``ast.parse`` and ``_Checker._load_statement`` give
    them; ``None`` for anything else: arguments that are not ``"label", "symbol", ..., alias = "symbol"``
    (implicit string concatenation, prefixed strings, repeated or reserved keywords, a lone carriage
    return, ...) and every error ``_load_statement`` would report."""
    if b"\r" in text.replace(b"\r\n", b""):
        return None  # Python reads a lone CR as a line break, also inside strings and comments
    body = text[5:-1]  # between "load(" and ")"
    strings: list[str] = []  # positional arguments
    keywords: list[tuple[str, str]] = []
    pending: str | None = None  # a keyword waiting for its value
    state = 0  # 0: an argument or ")" may come, 1: "," or ")", 2: "=", 3: the keyword's string
    at = 0
    for token in _LOAD_TOKEN.finditer(body):
        if token.start() != at:
            return None
        at = token.end()
        blank, double, single, name, punct = token.groups()
        if blank is not None:
            continue
        string = double if double is not None else single
        if string is not None:
            if state == 0 and not keywords:
                strings.append(string.decode())
            elif state == 3 and pending is not None:
                keywords.append((pending, string.decode()))
                pending = None
            else:
                return None
            state = 1
        elif name is not None:
            word = name.decode()
            if state != 0 or keyword.iskeyword(word) or any(word == k for k, _v in keywords):
                return None
            pending, state = word, 2
        elif punct == b"=" and state == 2:
            state = 3
        elif punct == b"," and state == 1:
            state = 0
        else:
            return None
    if at != len(body) or state > 1 or not strings:
        return None
    symbols = tuple((s, s) for s in strings[1:]) + tuple(keywords)
    if not symbols:
        return None
    for local, remote in symbols:
        if not remote.isidentifier() or remote.startswith("_") or local.startswith("__"):
            return None
    return strings[0], symbols


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
