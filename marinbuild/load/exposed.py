"""What Starlark sees of Python: a rules module as a frozen Starlark module, and the builtins.

A trusted rules module (``rules/*.py``) is shown to BUILD files as a Starlark module holding
only

- its rule types, each as a Starlark function ``name(*args, **kwargs)`` that hands its
  arguments (encoded as one JSON text: one conversion instead of one per value) and the
  Starlark call stack to ``RuleType.declare`` and returns the new target's label (a string):
  nothing of the ``RuleType`` (its implementation, attributes, output name) is reachable or
  settable from Starlark;
- its plain values: strings, numbers, booleans, None, and lists, tuples and dicts of them
  (dict keys strings), which Starlark freezes like any loaded value.

Anything else a module defines or imports (functions, classes, modules, paths...) is not
loadable. The names considered are the module's ``__all__``, or else its public names.
``add_builtins`` gives a Starlark module marinbuild's builtins (``marinbuild.load.builtins``).
Every Python callable is wrapped so that the exception it raises is recorded for the
located error (``marinbuild.load.located``).
"""

from __future__ import annotations

import json
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

MAX_VALUE_DEPTH = 100
"""How deeply the values given to a rule may nest (encoding a deeper one would exhaust the stack)."""

_WRAPPER_PRELUDE = f"""
def _check_depth(value):
    todo = [(value, 0)]
    for _ in range(1000000000):
        if not todo:
            return
        v, depth = todo.pop()
        if depth > {MAX_VALUE_DEPTH}:
            fail("a value given to a rule is nested more than {MAX_VALUE_DEPTH} levels deep")
        kind = type(v)
        if kind == "float" and str(v) in ("nan", "+inf", "-inf"):
            fail("a value given to a rule is not a finite number: %s" % v)
        if kind == "list" or kind == "tuple":
            todo.extend([(x, depth + 1) for x in v])
        elif kind == "dict":
            todo.extend([(x, depth + 1) for x in v.keys()])
            todo.extend([(x, depth + 1) for x in v.values()])
        elif kind == "struct":
            todo.extend([(getattr(v, k), depth + 1) for k in dir(v)])

def _encode(stack, args, kwargs):
    given = [args, kwargs]
    shown = repr(given)
    if "inf" in shown or "nan" in shown or shown.count("[") + shown.count("{{") + shown.count("(") > {MAX_VALUE_DEPTH}:
        _check_depth(given)
    return json.encode([stack, args, kwargs])
"""
"""Starlark helpers of the wrappers: ``json.encode`` recurses on the thread's stack without a limit,
so a value that may nest deeply (more brackets in its ``repr`` than the limit) is walked first,
iteratively, and refused past ``MAX_VALUE_DEPTH`` levels (cyclic values included); JSON has no
infinite or NaN floats (it would write ``null``), so a value whose ``repr`` may hold one is walked
too and such a float refused."""


def _dialect() -> sl.Dialect:
    dialect = sl.Dialect.standard()
    dialect.enable_top_level_stmt = True  # top-level if/for, as in Python
    dialect.enable_f_strings = False
    dialect.enable_types = sl.DialectTypes.DISABLE
    return dialect


DIALECT = _dialect()

_MAX_VALUE_DEPTH = 64


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


def add_builtins(module: sl.Module) -> None:
    """Give ``module`` marinbuild's builtins."""
    for name, fn in _NATIVE_BUILTINS.items():
        module.add_callable(name, fn)


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
            value.bind(name, label)
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
