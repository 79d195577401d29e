"""What Starlark sees of Python: a rules module as a frozen Starlark module, and the builtins.

A trusted rules module is shown to BUILD files holding only its rule types, each a Starlark function that hands its
arguments (as one JSON text: one conversion, not one per value) and the call stack to ``RuleType.declare`` and returns
the new label (nothing of the ``RuleType`` is reachable from Starlark), and its plain values (strings, numbers,
booleans, None, and lists, tuples and string-keyed dicts of them). Nothing else is loadable. The names are ``__all__``,
else the public names. Every Python callable is wrapped so its exception is recorded for the located error
(``load.located``)."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable
from typing import Any

import starlark as sl

from marinbuild.load.builtins import BUILTINS
from marinbuild.load.context import current_package
from marinbuild.load.declare import declare_target
from marinbuild.load.located import remember
from marinbuild.load.rules import RuleType

__all__ = [
    "DIALECT",
    "GLOBALS",
    "MAX_VALUE_DEPTH",
    "RulesModule",
    "add_builtins",
    "expose_rules_module",
    "native",
    "plain_value",
]

GLOBALS = sl.Globals.extended_by([sl.LibraryExtension.StructType])
"""What BUILD and ``.star`` files see: Starlark's standard functions plus ``struct``."""

_WRAPPER_GLOBALS = sl.Globals.extended_by(
    [sl.LibraryExtension.StructType, sl.LibraryExtension.Json, sl.LibraryExtension.CallStack]
)
"""What the generated rule wrappers see besides: ``json.encode`` and ``call_stack``."""

MAX_VALUE_DEPTH = 100  # How deeply the values given to a rule may nest (encoding a deeper one would exhaust the stack).

MAX_VALUE_ELEMENTS = 1_000_000
"""How many elements a value handed to a rule or a builtin (``str()``, ``glob()``..., ``_GUARDS``) may have, each use
of a shared part counted: ``x = [x, x]`` fifty times is a few lines and 2**50 elements once written out."""

_CHECK_SIZE = f"""
def _check_size(value, what, max_depth = {MAX_VALUE_ELEMENTS}, finite = False):
    level = [value]
    count = 0
    for _ in range(max_depth + 1):
        if not level:
            return
        below = []
        for v in level:
            kind = type(v)
            if kind == "list" or kind == "tuple":
                below += v
            elif kind == "dict":
                below += v.items()
            elif kind == "struct":
                below += [getattr(v, k) for k in dir(v)]
            elif finite and kind == "float" and str(v) in ("nan", "+inf", "-inf"):
                fail("%s is not a finite number: %s" % (what, v))
            if count + len(below) > {MAX_VALUE_ELEMENTS}:
                fail(("%s is too large: it has more than {MAX_VALUE_ELEMENTS} elements once written out "
                      + "(each use of a shared part counts): build smaller values") % what)
        count += len(below)
        level = below
    fail("%s is nested more than %d levels deep (or contains itself)" % (what, max_depth))
"""
"""Fails when ``value`` written out would have more than ``MAX_VALUE_ELEMENTS`` elements or nest more than ``max_depth``
levels (a cyclic value does both), or (``finite``) holds an infinite or NaN float. Walked level by level, iteratively,
each level's containers extended natively: its cost is bounded by ``MAX_VALUE_ELEMENTS`` whatever the value."""

_WRAPPER_PRELUDE = (
    _CHECK_SIZE
    + f"""
def _encode(stack, args, kwargs):
    _check_size([args, kwargs], "a value given to a rule", {MAX_VALUE_DEPTH}, True)
    return json.encode([stack, args, kwargs])
"""
)
"""Starlark helper of the wrappers: a rule's arguments are walked (``_check_size``) before ``json.encode``,
which recurses on the thread's stack without a limit (so they may nest at most ``MAX_VALUE_DEPTH``
levels; a cyclic value is refused too), writes out every use of a shared part (so they are bounded in
size) and has no infinite or NaN floats (it would write ``null``)."""

_PASSED_ON = ("print", "glob", "tpu", "checkpoint", "mirrored")  # guarded as one: size of their arguments checked
_BUILTINS_KEPT = "".join(f"_builtin_{name} = {name}\n" for name in ("str", "repr", "fail", *_PASSED_ON))
"""Starlark's own ``str``... (and marinbuild's ``print``, ``glob``, ``tpu``, ``checkpoint``), under other names
before ``_GUARDS`` replaces them."""

_GUARDS = (
    _CHECK_SIZE
    + """
_PLAIN = ("string", "int", "bool", "NoneType", "float")

def str(x):
    if type(x) not in _PLAIN:
        _check_size(x, "str()")
    return _builtin_str(x)

def repr(x):
    if type(x) not in _PLAIN:
        _check_size(x, "repr()")
    return _builtin_repr(x)

def fail(*args, **kwargs):
    _check_size(args, "fail()")
    _builtin_fail(*args, **kwargs)
"""
    + "".join(
        f'\ndef {name}(*args, **kwargs):\n    _check_size([args, kwargs], "{name}()")\n'
        f"    return _builtin_{name}(*args, **kwargs)\n"
        for name in _PASSED_ON
    )
)
"""Every BUILD and ``.star`` module's ``str``, ``repr``, ``fail``, ``print``, ``glob``, ``tpu`` and ``checkpoint``:
Starlark's own (or marinbuild's) once the value is bounded by ``_check_size``. Writing out a value of 2**50
elements would exhaust memory inside starlark-rust, which aborts the process rather than failing; handing it to
Python would copy every use of every shared part, for ever."""


def _dialect() -> sl.Dialect:
    dialect = sl.Dialect.standard()
    dialect.enable_top_level_stmt = True  # top-level if/for, as in Python
    dialect.enable_f_strings = False
    dialect.enable_types = sl.DialectTypes.DISABLE
    return dialect


DIALECT = _dialect()

_MAX_VALUE_DEPTH = 64

GUARDS_FILE = "<marinbuild builtins>"
"""The name of ``_GUARDS``'s text in Starlark's tracebacks (hidden from located errors, as generated code)."""


def native(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as Starlark should call it: its exception is recorded before it reaches Starlark."""

    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except BaseException as exc:
            remember(exc)
            raise

    call.__name__ = getattr(fn, "__name__", "builtin")
    return call


_NATIVE_BUILTINS = {name: native(fn) for name, fn in BUILTINS.items()}


_GUARDED_NAMES = ("str", "repr", "fail", "print", "glob", "tpu", "checkpoint", "mirrored")
_GUARDED = re.compile(rf"\b(?:{'|'.join(_GUARDED_NAMES)})\b")
_GUARD_ASTS: list[sl.AstModule] = []


def add_builtins(module: sl.Module, source: str) -> None:
    """Give ``module`` (text ``source``) marinbuild's builtins, bounded (``_GUARDS``) if ``source`` names one: builtins
    are reached by name only, so a file naming none is spared compiling the guards."""
    for name, fn in _NATIVE_BUILTINS.items():
        module.add_callable(name, fn)
    if not any(name in source for name in _GUARDED_NAMES) or _GUARDED.search(source) is None:  # substrings: 5x faster
        return
    if not _GUARD_ASTS:
        _GUARD_ASTS.extend(sl.parse(GUARDS_FILE, text, DIALECT) for text in (_BUILTINS_KEPT, _GUARDS))
    for ast in _GUARD_ASTS:
        sl.eval(module, ast, GLOBALS)


def plain_value(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is plain data a rules module may export (see the module docstring)."""
    if value is None or type(value) in (str, int, float, bool):
        return True
    if depth >= _MAX_VALUE_DEPTH:
        return False
    if type(value) in (list, tuple):
        return all(plain_value(x, depth + 1) for x in value)
    if type(value) is dict:
        return all(type(k) is str and plain_value(v, depth + 1) for k, v in value.items())
    return False


class RulesModule:
    """A rules module as Starlark sees it: the frozen module and the names it exports."""

    def __init__(self, frozen: sl.FrozenModule, names: list[str], hidden: list[str]) -> None:
        self.frozen = frozen
        self.names = names
        self.hidden = hidden  # public names that are not loadable (functions, classes...)


def _declarer(rule: RuleType) -> Callable[[str], str]:
    loads = json.loads

    def declare(call: str) -> str:
        ctx = current_package(f"rule {rule.display_name}()")
        stack, args, kwargs = loads(call)
        return str(declare_target(rule, ctx, stack, args, kwargs))

    return declare


def expose_rules_module(module: types.ModuleType, label: str) -> RulesModule:
    """The Starlark module showing ``module``'s rule types and plain values (see the module docstring)."""
    namespace = vars(module)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in namespace if not n.startswith("_")]
    rules: list[RuleType] = []
    values: dict[str, Any] = {}
    hidden: list[str] = []
    wrappers: list[str] = []
    exported: list[str] = []
    for name in names:
        if name.startswith("_") or name not in namespace:
            continue
        value = namespace[name]
        if isinstance(value, RuleType):
            if not name.isidentifier():
                continue
            value.bind(name, label, module.__name__)
            wrappers.append(
                f"def {name}(*args, **kwargs):\n    return _declare_{len(rules)}(_encode(call_stack(), args, kwargs))\n"
            )
            rules.append(value)
            exported.append(name)
        elif plain_value(value):
            values[name] = value
            exported.append(name)
        else:
            hidden.append(name)
    starlark_module = sl.Module()
    for index, rule in enumerate(rules):
        starlark_module.add_callable(f"_declare_{index}", native(_declarer(rule)))
    if wrappers:
        ast = sl.parse(f"<rules module {label}>", _WRAPPER_PRELUDE + "".join(wrappers), DIALECT)
        sl.eval(starlark_module, ast, _WRAPPER_GLOBALS)
    for name, value in values.items():
        starlark_module[name] = value
    return RulesModule(starlark_module.freeze(), exported, hidden)
