"""Declaring a target: what calling a rule in a BUILD file (or a macro it calls) does. ``declare_target`` checks the
call's attributes against the ``RuleType`` in declared order (the first problem is reported), fills in defaults
(``fill_plan``), runs the rule's ``check`` and records the ``Target``. Its errors point at the call, at the keyword at
fault if any, and name the macro that made the call if any."""

from __future__ import annotations

import difflib
import itertools
from types import MappingProxyType
from typing import Any

from marinbuild.core.labels import Label, LabelError, validate_target_name
from marinbuild.load.attrs import _PLAIN_NAME, _UNSET, AttrValueError
from marinbuild.load.context import PackageContext
from marinbuild.load.errors import BuildFileError, Location
from marinbuild.load.locate import call_location, keyword_location
from marinbuild.load.located import source_path, stack_frames
from marinbuild.load.rules import FILL_CONSTANT, FILL_EMPTY, RuleType
from marinbuild.load.target import Site, Target, site_location

_ORDER = itertools.count(1)


def declare_target(rule: RuleType, ctx: PackageContext, stack: str, args: Any, kwargs: dict[str, Any]) -> Label:
    """Declare a target in ``ctx``'s package; ``stack``: Starlark's ``call_stack()`` text, read only for a location."""
    site: Site = (ctx.display, ctx.build_file, stack)
    if args:
        raise _error(ctx, site, None, "rules take keyword arguments only (name = ..., attr = ...)")
    name = kwargs.pop("name", None)
    if name is None:
        missing = f"{rule.display_name}() is missing the mandatory attribute 'name'"
        raise _error(ctx, site, None, missing)
    if not isinstance(name, str):
        raise _error(ctx, site, "name", f"attribute 'name' must be a string, got {name!r}")
    plain = (name.isidentifier() and name.isascii()) or _PLAIN_NAME.match(name) is not None
    if not plain:
        try:
            validate_target_name(name)
        except LabelError as exc:
            raise _error(ctx, site, "name", f"invalid target name: {exc}") from None
    pinned = kwargs.pop("pin", False)
    if type(pinned) is not bool:
        raise _error(ctx, site, "pin", f"attribute 'pin' must be True or False, got {pinned!r}")
    attrs = rule.attrs
    if not rule.attr_names.issuperset(kwargs):
        unknown = next(k for k in kwargs if k not in attrs)
        close = difflib.get_close_matches(unknown, list(rule.attrs), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        valid = ", ".join(["name", *rule.attrs, "pin"])
        text = f"{rule.display_name}() has no attribute {unknown!r} ({hint}attributes: {valid})"
        raise _error(ctx, site, unknown, text)
    package = ctx.package
    values: dict[str, Any] = {}
    get = kwargs.get
    key = ""
    value = None
    try:
        for key, spec, convert, fill, empty in rule.fill_plan:  # declared order: the first problem is reported
            value = get(key)  # None: not given
            if value is not None and convert is not None:
                values[key] = convert(value, package)
            elif value is None and fill == FILL_CONSTANT:
                values[key] = empty
            elif value is None and fill == FILL_EMPTY:
                values[key] = spec.empty()
            elif value is None and spec.mandatory:
                missing = f"{rule.display_name}(name={name!r}) is missing the mandatory attribute {key!r}"
                raise _error(ctx, site, None, missing)
            else:  # a type's own value_or_default() tells "not given" (_UNSET) from None
                values[key] = spec.value_or_default(value if key in kwargs else _UNSET, package)
    except (AttrValueError, RecursionError) as exc:
        what = "default of attribute" if value is None else "attribute"
        text = "value nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise _error(ctx, site, key, f"{what} {key!r} of {rule.display_name}(name={name!r}): {text}") from None
    if rule.check is not None:
        try:
            rule.check(MappingProxyType(values))
        except AttrValueError as exc:
            keyword = exc.attr if exc.attr in kwargs else None
            raise _error(ctx, site, keyword, f"{rule.display_name}(name={name!r}): {exc}") from None
    targets = ctx.targets
    previous = targets.get(name)
    if previous is not None:
        raise _error(ctx, site, "name", f"duplicate target name {name!r}: already declared at {previous.location}")
    label = Label(package, name)
    targets[name] = Target(label, rule, values, site, (), (), (), next(_ORDER), pinned)
    return label


def _error(ctx: PackageContext, site: Site, keyword: str | None, message: str) -> BuildFileError:
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
