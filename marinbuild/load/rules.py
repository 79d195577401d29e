"""``rule()``: defining rule types, and declaring targets by calling them in BUILD files.

A rules module (a trusted Python file under a workspace's ``rules/`` folder, or shipped
as ``@marinbuild//rules:...``) writes::

    from marinbuild.load import attr, rule

    def _tokenize_impl(ctx): ...

    tokenize = rule(
        implementation=_tokenize_impl,
        attrs={"dataset": attr.label(mandatory=True), "tokenizer": attr.string(default="llama3")},
        doc="Tokenize a dataset.",
    )

and a BUILD file calls ``tokenize(name="x", dataset=":raw")``, which records a ``Target``
in the package being evaluated (the rule's name, ``tokenize``, comes from the variable it
is exported as). ``name`` is implicit and mandatory. Starlark code never holds a ``RuleType``:
it gets an opaque function that calls ``RuleType.declare`` (see ``marinbuild.load.exposed``).
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from marinbuild.core.labels import Label, LabelError, validate_target_name
from marinbuild.load.attrs import (
    _PLAIN_NAME,
    _UNSET,
    Attr,
    AttrValueError,
)
from marinbuild.load.context import PackageContext
from marinbuild.load.errors import BuildFileError, Location
from marinbuild.load.locate import call_location, keyword_location
from marinbuild.load.located import source_path, stack_frames
from marinbuild.load.target import Site, Target, site_location

__all__ = ["RuleType", "rule"]

_RESERVED_ATTRS = frozenset({"name"})
_ORDER = itertools.count(1)


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
        self.label_attrs: tuple[str, ...] = tuple(k for k, a in attrs.items() if a.has_labels)
        self.label_specs: tuple[tuple[str, Attr], ...] = tuple((k, attrs[k]) for k in self.label_attrs)
        self._plan = tuple((k, a, *_plan_of(a)) for k, a in attrs.items())
        self._names = frozenset(attrs)

    @property
    def display_name(self) -> str:
        return self.name or "<unnamed rule>"

    def bind(self, name: str, defined_in: str) -> None:
        """Give the rule its exported name (done once, by the loader, when its module is loaded)."""
        if self.name is None:
            self.name = name
            self.defined_in = defined_in

    def _what(self) -> str:
        return f"rule {self.display_name}()"

    def __repr__(self) -> str:
        where = f" from {self.defined_in}" if self.defined_in else ""
        return f"<rule {self.display_name}{where}>"

    def declare(self, ctx: PackageContext, stack: str, args: Any, kwargs: dict[str, Any]) -> Label:
        """Declare a target in ``ctx``'s package from a call in a BUILD file (or a macro it calls).

        ``stack`` is the Starlark call stack's text (``call_stack()``), read only when a location
        is needed: the target's location is the BUILD file's own frame. Returns the target's label.
        """
        site: Site = (ctx.display, ctx.build_file, stack)
        if args:
            raise self._error(ctx, site, None, "rules take keyword arguments only (name = ..., attr = ...)")
        name = kwargs.pop("name", None)
        if name is None:
            missing = f"{self.display_name}() is missing the mandatory attribute 'name'"
            raise self._error(ctx, site, None, missing)
        if not isinstance(name, str):
            raise self._error(ctx, site, "name", f"attribute 'name' must be a string, got {name!r}")
        plain = (name.isidentifier() and name.isascii()) or _PLAIN_NAME.match(name) is not None
        if not plain:
            try:
                validate_target_name(name)
            except LabelError as exc:
                raise self._error(ctx, site, "name", f"invalid target name: {exc}") from None
        attrs = self.attrs
        if not self._names.issuperset(kwargs):
            unknown = next(k for k in kwargs if k not in attrs)
            close = difflib.get_close_matches(unknown, list(self.attrs), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            valid = ", ".join(["name", *self.attrs])
            text = f"{self.display_name}() has no attribute {unknown!r} ({hint}attributes: {valid})"
            raise self._error(ctx, site, unknown, text)
        package = ctx.package
        values: dict[str, Any] = {}
        get = kwargs.get
        key = ""
        value = None
        try:
            for key, spec, convert, fill, empty in self._plan:  # declared order: the first problem is reported
                value = get(key)  # None: not given
                if value is not None and convert is not None:
                    values[key] = convert(value, package)
                elif value is None and fill == _FILL_CONSTANT:
                    values[key] = empty
                elif value is None and fill == _FILL_EMPTY:
                    values[key] = spec.empty()
                elif value is None and spec.mandatory:
                    raise self._error(
                        ctx,
                        site,
                        None,
                        f"{self.display_name}(name={name!r}) is missing the mandatory attribute {key!r}",
                    )
                else:  # a type's own value_or_default() tells "not given" (_UNSET) from None
                    values[key] = spec.value_or_default(value if key in kwargs else _UNSET, package)
        except (AttrValueError, RecursionError) as exc:
            what = "default of attribute" if value is None else "attribute"
            text = "value nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise self._error(ctx, site, key, f"{what} {key!r} of {self.display_name}(name={name!r}): {text}") from None
        if self.check is not None:
            try:
                self.check(MappingProxyType(values))
            except AttrValueError as exc:
                keyword = exc.attr if exc.attr in kwargs else None
                raise self._error(ctx, site, keyword, f"{self.display_name}(name={name!r}): {exc}") from None
        targets = ctx.targets
        previous = targets.get(name)
        if previous is not None:
            raise self._error(
                ctx, site, "name", f"duplicate target name {name!r}: already declared at {previous.location}"
            )
        label = Label(package, name)
        targets[name] = Target(label, self, values, site, (), (), (), next(_ORDER))
        return label

    def _error(self, ctx: PackageContext, site: Site, keyword: str | None, message: str) -> BuildFileError:
        site, inner = _sites(ctx, stack_frames(site[2]) if isinstance(site, tuple) else [])
        location = site_location(site)
        if keyword is not None:
            location = keyword_location(location, ctx.build_file, keyword)
        if inner is not None:
            message = f"{message} (in the macro at {site_location(inner)})"
        return BuildFileError.at(location, message)


def _sites(ctx: PackageContext, frames: list[tuple[str, int]]) -> tuple[Location, Location | None]:
    """The rule call's location (the BUILD file's innermost frame) and, if a macro made the call, the macro's."""
    frames = [f for f in frames if not f[0].startswith("<")]  # not the generated rule wrapper
    display = ctx.display
    own = None
    for path, line in reversed(frames):
        if path == display:
            own = call_location(display, ctx.build_file, line)
            break
    if own is None:
        own = Location(display, 1, 1)
    if not frames or frames[-1][0] == display:
        return own, None
    path, line = frames[-1]
    root = ctx.build_file[: len(ctx.build_file) - len(display)]
    return own, call_location(path, source_path(root, path), line)


_FILL_DEFAULT, _FILL_EMPTY, _FILL_CONSTANT = 0, 1, 2
_IMMUTABLE = frozenset({str, int, float, bool, type(None), tuple})


def _plan_of(spec: Attr) -> tuple[Callable[[Any, str], Any] | None, int, Any]:
    """How a rule call fills attribute ``spec``: ``(convert, fill, empty)``.

    A given value goes straight to ``convert`` unless the type has its own ``value_or_default()``
    (then ``convert`` is ``None``). A value not given, for an optional attribute without a
    default, is ``empty`` itself (``_FILL_CONSTANT``: an immutable value, the same every time) or
    a new ``spec.empty()`` (``_FILL_EMPTY``); anything else goes through ``value_or_default``.
    """
    if type(spec).value_or_default is not Attr.value_or_default:
        return None, _FILL_DEFAULT, None
    if spec.mandatory or not (spec.default is _UNSET or spec.default is None):
        return spec.convert, _FILL_DEFAULT, None
    empty = spec.empty()
    if type(empty) in _IMMUTABLE and (type(empty) is not tuple or empty == ()):
        return spec.convert, _FILL_CONSTANT, empty
    return spec.convert, _FILL_EMPTY, None


def rule(
    implementation: Callable[..., Any] | None = None,
    attrs: Mapping[str, Attr] | None = None,
    doc: str = "",
    output_name: str | None = None,
    analyze: Callable[..., Any] | None = None,
    check: Callable[[Mapping[str, Any]], None] | None = None,
) -> RuleType:
    """Define a rule type: ``implementation(ctx)`` runs at build time; ``attrs`` declares its attributes.

    ``output_name`` sets the step name, the part of the output path before the hash
    (``{package}`` and ``{name}`` are filled in; default ``"{package}/{name}"``). The rule's
    own name is the variable it is exported as. A rule that turns a target into existing
    ``ExecutorStep``s instead (Python experiment scripts) gives ``analyze(actx)`` in place of
    an implementation; see ``marinbuild.analysis.analyze``.

    ``check(values)``, if given, runs when a BUILD file declares a target, after each attribute's
    type is checked: ``values`` are all the attributes (name -> converted value, defaults filled
    in). It raises ``AttrValueError(message, attr=...)`` for a mistake the types cannot express
    (attributes that exclude or need each other, a string's format), which becomes a load error
    at that attribute (or at the call): the mistake is reported by ``query`` and ``build -n``
    alike, before anything runs. It must be cheap and must not touch the network or the files.
    """
    return RuleType(implementation, attrs, doc, output_name, analyze, check)
