"""A declared target: what a rule call in a BUILD file records.

The evaluator fills label, rule type, attributes and call site; the loader ``deps``, ``srcs`` and ``source_paths``. The
call site is kept as text (``Site``) and made a ``Location`` only when asked. After analysis a build may
``drop_declaration`` (attributes and call site); a later read raises ``DroppedDeclaration`` rather than pass for a
target without attributes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.core.labels import Label
from marinbuild.load.errors import Location
from marinbuild.load.locate import call_location
from marinbuild.load.located import stack_frames
from marinbuild.load.rules import RuleType

__all__ = ["DroppedDeclaration", "Site", "Target", "site_location"]

Site = tuple[str, str, str] | Location
"""Where a rule was called: a ``Location``, or ``(BUILD file's display path, its path, Starlark call
stack text)``, read only when the location is asked for (``site_location``)."""


def site_location(site: Site) -> Location:
    """The ``Location`` of a ``Site``: the innermost frame of the BUILD file in the call stack."""
    if isinstance(site, Location):
        return site
    display, path, stack = site
    for frame_path, line in reversed(stack_frames(stack)):
        if frame_path == display:
            return call_location(display, path, line)
    return Location(display, 1, 1)


class DroppedDeclaration(RuntimeError):
    """A read of a target's attributes or call site after ``Target.drop_declaration``."""

    def __init__(self, *args: Any) -> None:
        super().__init__(
            "this target's attributes and call site were dropped once its step was made "
            "(Session.analyse(drop_declarations=True)); load it again to read them"
        )


class _DroppedAttrs(dict[str, Any]):
    """``Target.attrs`` after ``drop_declaration``: every read raises ``DroppedDeclaration``."""

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise DroppedDeclaration

    __getitem__ = __iter__ = __len__ = __contains__ = get = items = keys = values = copy = _refuse


_DROPPED_ATTRS = _DroppedAttrs()


@dataclass(eq=False, slots=True)
class Target:
    """A target: label, rule type, attributes (``name`` excluded), location; the loader fills ``deps``, ``srcs``."""

    label: Label
    rule: RuleType
    attrs: dict[str, Any]
    site: Site | None
    """Where the rule was called: a ``Location``, or a cheaper ``Site`` turned into one on use; None once
    dropped (``drop_declaration``)."""
    deps: tuple[Label, ...] = ()
    srcs: tuple[Label, ...] = ()
    source_paths: tuple[Path, ...] = ()
    _refs: list[tuple[str, Label]] | None = field(default=None, init=False, repr=False)
    order: int = field(default=0, repr=False)
    """When the target was declared (a sequence number of the process evaluating BUILD files): the loader
    skips looking for dependency cycles when every dependency was declared before the target depending on it
    (a numbering that is not in declaration order only makes it look more often)."""
    pinned: bool = False
    """``pin = True`` in the BUILD file: ``cache gc`` never deletes any version of its outputs."""

    def drop_declaration(self) -> None:
        """Drop the attributes and call site (read by loading and analysis only); reading them then raises."""
        self.attrs = _DROPPED_ATTRS
        self.site = None
        self._refs = None

    @property
    def location(self) -> Location:
        """``path/BUILD.marin:line:col`` of the rule call."""
        site = self.site
        if site is None:
            raise DroppedDeclaration
        if not isinstance(site, Location):
            site = self.site = site_location(site)
        return site

    @property
    def name(self) -> str:
        return self.label.name

    @property
    def kind(self) -> str:
        """The rule's name, e.g. ``"tokenize"``."""
        return self.rule.display_name

    def source_files(self) -> tuple[Path, ...]:
        """Absolute paths of the source files this target refers to (via any label attribute)."""
        return self.source_paths

    def label_refs(self) -> list[tuple[str, Label]]:
        """Every ``(attribute name, label)`` this target refers to, in declaration order."""
        refs = self._refs
        if refs is None:
            refs = []
            append = refs.append
            attrs = self.attrs
            for name, spec in self.rule.label_specs:
                value = attrs[name]
                if value is not None:
                    for label in spec.labels(value):  # a plain loop: the lists are short
                        append((name, label))
            self._refs = refs
        return refs

    def __repr__(self) -> str:
        return f"<Target {self.label} ({self.kind})>"
