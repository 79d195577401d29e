"""``rule()``: defining rule types, which BUILD files call to declare targets.

A rules module (trusted Python under a workspace's ``rules/``, or ``@marinbuild//rules:...``) writes ``tokenize =
rule(implementation=_impl, attrs={...}, doc=...)``; a BUILD file's ``tokenize(name="x", ...)`` records a ``Target`` (the
rule's name is the variable it is exported as; ``name`` is implicit and mandatory, ``pin`` implicit, for ``cache gc``).
Starlark never holds a ``RuleType``, only an opaque function calling ``declare.declare_target`` (``exposed``). A
``RuleType`` is the definition only (its attributes and ``fill_plan``), so imports go one way: ``target`` holds a
``RuleType``, ``context`` holds targets, ``declare`` uses all three."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from marinbuild.load.attrs import _UNSET, Attr

__all__ = ["FILL_CONSTANT", "FILL_DEFAULT", "FILL_EMPTY", "RuleType", "rule"]

_RESERVED_ATTRS = frozenset({"name", "pin"})


class RuleType:
    """A rule type made by ``rule()``; calling it in a BUILD file declares a target and returns its label."""

    def __init__(
        self,
        implementation: Callable[..., Any] | None,
        attrs: Mapping[str, Attr] | None = None,
        doc: str = "",
        output_name: str | None = None,
        analyze: Callable[..., Any] | None = None,
        check: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> None:
        if analyze is not None and not callable(analyze):
            raise TypeError(f"rule(): analyze must be callable, got {analyze!r}")
        if check is not None and not callable(check):
            raise TypeError(f"rule(): check must be callable, got {check!r}")
        if analyze is None and not callable(implementation):
            raise TypeError(f"rule(): implementation must be callable, got {implementation!r}")
        attrs = dict(attrs or {})
        for key, spec in attrs.items():
            if not isinstance(key, str) or not key.isidentifier() or key.startswith("_"):
                raise ValueError(f"rule(): attribute name {key!r} must be a public identifier")
            if key in _RESERVED_ATTRS:
                raise ValueError(f"rule(): attribute {key!r} is implicit and cannot be declared")
            if not isinstance(spec, Attr):
                raise TypeError(f"rule(): attribute {key!r} must be an attr.*() type, got {spec!r}")
        if output_name is not None and not isinstance(output_name, str):
            raise TypeError("rule(): output_name must be a string or None")
        self.implementation = implementation
        self.analyze = analyze
        self.attrs: dict[str, Attr] = attrs
        self.doc = doc
        self.output_name = output_name
        self.check = check
        self.name: str | None = None
        self.defined_in: str | None = None  # label of the file that exported it
        self.home: tuple[str, str] | None = None  # (module name, variable) of that file, where the rule is found
        self.label_attrs: tuple[str, ...] = tuple(k for k, a in attrs.items() if a.has_labels)
        self.label_specs: tuple[tuple[str, Attr], ...] = tuple((k, attrs[k]) for k in self.label_attrs)
        self.fill_plan = tuple((k, a, *_plan_of(a)) for k, a in attrs.items())
        self.attr_names = frozenset(attrs)

    @property
    def display_name(self) -> str:
        return self.name or "<unnamed rule>"

    def bind(self, name: str, defined_in: str, module: str) -> None:
        """Give the rule its exported name (done once, by the loader, when its module ``module`` is loaded)."""
        if self.name is None:
            self.name = name
            self.defined_in = defined_in
            self.home = (module, name)

    def __repr__(self) -> str:
        where = f" from {self.defined_in}" if self.defined_in else ""
        return f"<rule {self.display_name}{where}>"


FILL_DEFAULT, FILL_EMPTY, FILL_CONSTANT = 0, 1, 2
_IMMUTABLE = frozenset({str, int, float, bool, type(None), tuple})


def _plan_of(spec: Attr) -> tuple[Callable[[Any, str], Any] | None, int, Any]:
    """How a rule call fills attribute ``spec``: ``(convert, fill, empty)``. A given value goes to ``convert`` (``None``
    when the type has its own ``value_or_default()``); a missing optional one without default is ``empty`` itself
    (``FILL_CONSTANT``, immutable) or a new ``spec.empty()`` (``FILL_EMPTY``); anything else goes through
    ``value_or_default``."""
    if type(spec).value_or_default is not Attr.value_or_default:
        return None, FILL_DEFAULT, None
    if spec.mandatory or not (spec.default is _UNSET or spec.default is None):
        return spec.convert, FILL_DEFAULT, None
    empty = spec.empty()
    if type(empty) in _IMMUTABLE and (type(empty) is not tuple or empty == ()):
        return spec.convert, FILL_CONSTANT, empty
    return spec.convert, FILL_EMPTY, None


def rule(
    implementation: Callable[..., Any] | None = None,
    attrs: Mapping[str, Attr] | None = None,
    doc: str = "",
    output_name: str | None = None,
    analyze: Callable[..., Any] | None = None,
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> RuleType:
    """Define a rule type: ``implementation(ctx)`` runs at build time; ``attrs`` declares its attributes
    (docs/rules.md).

    ``output_name``: the step name (default ``"{package}/{name}"``). ``analyze(actx)`` instead of an implementation
    turns a target into existing ``ExecutorStep``s. ``check(values)`` runs as a target is declared, on all attributes,
    raising ``AttrValueError(message, attr=...)`` for what types cannot express; it must be cheap and touch neither
    network nor files."""
    return RuleType(implementation, attrs, doc, output_name, analyze, check)
