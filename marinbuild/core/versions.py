"""Versions, version strings, hashes and output paths of steps, exactly as Marin computes them.

A step's version is ``{"name", "config" (its versioned values), "dependencies": [...]}``
(plus ``"pseudo_dependencies"`` when it has any); a dependency deeper than 4 levels is
written as ``"name-hash"``. The version string is ``json.dumps(version, sort_keys=True)``
and the output path ``<prefix>/<name>-<md5(version_str)[:6]>``.

Two things differ from Marin, neither visible in the results:
- the walk is iterative, so a 10,000-step chain does not hit Python's recursion limit;
- a version string is composed from its dependencies' already-computed strings instead
  of serialising every nested version again for each consumer (byte-identical, because
  ``json.dumps`` of a nested sorted dict is the nested dict's own sorted dump).
"""

from __future__ import annotations

import abc
import contextlib
import gc
import hashlib
import json
import os
import re
from collections.abc import Iterator
from typing import Any

from marinbuild.core.jsonenc import dumps_indented, dumps_sorted
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.walk import collect_dependencies_and_version, instantiate_config, make_prefix_absolute_path

_json_str = json.encoder.encode_basestring_ascii  # what json.dumps(a_str) returns, without the call chain

MAX_INLINE_DEPTH = 4
"""Dependencies whose chain depth is at most this are inlined into a consumer's version."""


_SLOT = "\u0000marinbuild-slot-"
_SLOT_RE = re.compile(r'( *)"\\u0000marinbuild-slot-(\d+)"')


def dumps_indented_with(obj: Any, slots: list[str]) -> str:
    """``json.dumps(obj, indent=2)`` where each string ``slot(i)`` in ``obj`` stands for the
    already-indented JSON text ``slots[i]``: big shared sub-documents are encoded once."""
    text = dumps_indented(obj)

    def fill(match: re.Match[str]) -> str:
        pad = match.group(1)
        return pad + slots[int(match.group(2))].replace("\n", "\n" + pad)

    return _SLOT_RE.sub(fill, text)


def slot(i: int) -> str:
    return f"{_SLOT}{i}"


class _CompletedOnRead(dict, metaclass=abc.ABCMeta):
    """A dict some of whose entries are made on demand: iterating, sizing, copying or printing it
    completes it first (``_complete``), so it behaves as the plain dict Marin's attribute is."""

    @abc.abstractmethod
    def _complete(self) -> None:
        """Make every entry not made yet."""

    def __iter__(self) -> Any:
        self._complete()
        return dict.__iter__(self)

    def keys(self) -> Any:
        self._complete()
        return dict.keys(self)

    def values(self) -> Any:
        self._complete()
        return dict.values(self)

    def items(self) -> Any:
        self._complete()
        return dict.items(self)

    def copy(self) -> dict[Any, Any]:
        self._complete()
        return dict(dict.items(self))

    def __repr__(self) -> str:
        self._complete()
        return dict.__repr__(self)


class LazyConfigs(_CompletedOnRead):
    """``step -> instantiated config``, computed on first access (most no-op builds never need one).

    Iterating, sizing or copying it instantiates every pending config first, so it behaves
    as the plain dict Marin's ``Executor.configs`` is.
    """

    def __init__(self, output_paths: dict[ExecutorStep, str], prefix: str):
        super().__init__()
        self._pending: dict[ExecutorStep, tuple[Any, str]] = {}
        self._output_paths = output_paths
        self._prefix = prefix

    def defer(self, step: ExecutorStep, config: Any, output_path: str) -> None:
        self._pending[step] = (config, output_path)

    def __missing__(self, step: ExecutorStep) -> Any:
        raw, output_path = self._pending.pop(step)  # KeyError for unknown steps, as a dict
        value = instantiate_config(raw, output_path, self._output_paths, self._prefix)
        dict.__setitem__(self, step, value)
        return value

    def _complete(self) -> None:
        for step in list(self._pending):
            self[step]

    def get(self, step: Any, default: Any = None) -> Any:
        return self[step] if step in self else default

    def __contains__(self, step: object) -> bool:
        return dict.__contains__(self, step) or step in self._pending

    def __len__(self) -> int:
        return dict.__len__(self) + len(self._pending)


class VersionStrIndex(_CompletedOnRead):
    """Marin's ``version_str_to_step`` (version string -> the step that stands for it), filled on first use.

    The engine deduplicates by the full md5 of the version string instead, so computing versions never
    hashes the (up to tens of kB) version strings into a dict; this view is built from ``steps`` when read.
    """

    def __init__(self, table: VersionTable):
        super().__init__()
        self._table = table
        self._synced = 0

    def _complete(self) -> None:
        steps = self._table.steps
        if self._synced < len(steps):
            strs = self._table.version_strs
            for step in steps[self._synced:]:
                dict.__setitem__(self, strs[step], step)
            self._synced = len(steps)

    def __getitem__(self, key: str) -> ExecutorStep:
        self._complete()
        return dict.__getitem__(self, key)

    def __contains__(self, key: object) -> bool:
        self._complete()
        return dict.__contains__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        self._complete()
        return dict.get(self, key, default)

    def __len__(self) -> int:
        self._complete()
        return dict.__len__(self)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector (nestable). Computing versions and plans allocates many small
    objects that are never cyclic garbage; the collector would rescan the growing tables again and again."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class VersionCycleError(ValueError):
    """A step's config refers, through other steps, back to itself."""


class VersionTable:
    """Everything Marin's ``Executor`` records per step while computing versions.

    The attributes have Marin's names and meanings; ``steps`` lists one step per distinct
    version, in the order Marin would list them (dependencies before consumers).
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.steps: list[ExecutorStep] = []
        self.output_paths: dict[ExecutorStep, str] = {}
        self.configs: dict[ExecutorStep, Any] = LazyConfigs(self.output_paths, prefix)
        self.dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.pseudo_dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.versions: dict[ExecutorStep, dict[str, Any]] = {}
        self.version_strs: dict[ExecutorStep, str] = {}
        self.version_str_to_step: dict[str, ExecutorStep] = VersionStrIndex(self)
        self._canonical_by_md5: dict[str, ExecutorStep] = {}
        self._md5: dict[ExecutorStep, str] = {}
        self.hashed_versions: dict[ExecutorStep, str] = {}
        self.is_pseudo_dep: dict[ExecutorStep, bool] = {}
        self.depth: dict[ExecutorStep, int] = {}
        self.duplicate_names: set[str] = set()
        self._indented: dict[ExecutorStep, str] = {}
        self._step_by_version_id: dict[int, ExecutorStep] = {}
        self.override_mismatches: list[tuple[ExecutorStep, str, str]] = []
        self._prefix_slash = (prefix if prefix.endswith("/") else prefix + "/") if prefix else None

    def canonicalize(self, step: ExecutorStep) -> ExecutorStep:
        """The step that stands for every step with the same version."""
        return self._canonical_by_md5[self._md5[step]]

    def compute_version(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        """Compute versions and paths of ``step`` and everything it depends on (post-order, no recursion)."""
        if not gc.isenabled():  # inside Executor.run's pause: no context manager per step
            self._compute(step, is_pseudo_dep)
            return
        with gc_paused():
            self._compute(step, is_pseudo_dep)

    def _compute(self, step: ExecutorStep, is_pseudo_dep: bool) -> None:
        # A frame: [step, pseudo flag, collected deps or None, children, next child index]
        stack: list[list[Any]] = [[step, is_pseudo_dep, None, None, 0]]
        on_stack: set[int] = set()
        while stack:
            frame = stack[-1]
            current, pseudo = frame[0], frame[1]
            if frame[2] is None:
                if current in self.versions:
                    if not pseudo and self.is_pseudo_dep[current]:
                        self._unmark_pseudo(current)
                    stack.pop()
                    continue
                if id(current) in on_stack:
                    names = [f[0].name for f in stack if f[2] is not None] + [current.name]
                    raise VersionCycleError("dependency cycle: " + " -> ".join(names))
                on_stack.add(id(current))
                collected = collect_dependencies_and_version(current.config)
                frame[2] = collected
                frame[3] = [(d, pseudo) for d in collected.dependencies] + [
                    (d, True) for d in collected.pseudo_dependencies
                ]
            children = frame[3]
            pushed = False
            while frame[4] < len(children):
                child, child_pseudo = children[frame[4]]
                frame[4] += 1
                if child in self.versions:  # done already: only a blocking use can unmark a pseudo step
                    if not child_pseudo and self.is_pseudo_dep[child]:
                        self._unmark_pseudo(child)
                    continue
                stack.append([child, child_pseudo, None, None, 0])
                pushed = True
                break
            if pushed:
                continue
            stack.pop()
            on_stack.discard(id(current))
            self._record(current, pseudo, frame[2])

    def indented_version(self, step: ExecutorStep) -> str:
        """``json.dumps(self.versions[step], indent=2)``, composed from the dependencies' texts."""
        text = self._indented.get(step)
        if text is not None:
            return text
        version = self.versions[step]
        slots: list[str] = []
        shell: dict[str, Any] = {}
        for key, value in version.items():
            if key in ("dependencies", "pseudo_dependencies"):
                items = []
                for dep_version in value:
                    if isinstance(dep_version, dict):
                        dep = self._step_by_version_id[id(dep_version)]
                        slots.append(self.indented_version(dep))
                        items.append(slot(len(slots) - 1))
                    else:
                        items.append(dep_version)
                shell[key] = items
            else:
                shell[key] = value
        text = dumps_indented_with(shell, slots)
        self._indented[step] = text
        return text

    def _under_prefix(self, name: str) -> str:
        """``os.path.join(prefix, name)``, with the common case (a relative name) as one concatenation."""
        if self._prefix_slash is None or name.startswith("/"):
            return os.path.join(self.prefix, name)
        return self._prefix_slash + name

    def _unmark_pseudo(self, step: ExecutorStep) -> None:
        """A step reached through a blocking edge is not pseudo, nor are its blocking dependencies."""
        todo = [step]
        while todo:
            s = todo.pop()
            if self.is_pseudo_dep.get(s):
                self.is_pseudo_dep[s] = False
                todo.extend(self.dependencies[s])

    def _dep_version(self, dep: ExecutorStep) -> tuple[Any, str]:
        """(version as stored in the consumer's version dict, its JSON text)."""
        if self.depth[dep] <= MAX_INLINE_DEPTH:
            return self.versions[dep], self.version_strs[dep]
        short = f"{dep.name}-{self.hashed_versions[dep]}"
        return short, json.dumps(short)

    def _record(self, step: ExecutorStep, pseudo: bool, collected: Any) -> None:
        depth, versions, strs = self.depth, self.versions, self.version_strs
        deps = [(versions[d], strs[d]) if depth[d] <= MAX_INLINE_DEPTH else self._dep_version(d)
                for d in collected.dependencies]
        version: dict[str, Any] = {
            "name": step.name,
            "config": collected.version,
            "dependencies": [v for v, _ in deps],
        }
        parts = [
            '{"config": ',
            dumps_sorted(collected.version),
            ', "dependencies": [',
            ", ".join(s for _, s in deps),
            '], "name": ',
            _json_str(step.name),
        ]
        if collected.pseudo_dependencies:
            pseudo_deps = [self._dep_version(d) for d in collected.pseudo_dependencies]
            version["pseudo_dependencies"] = [v for v, _ in pseudo_deps]
            parts += [', "pseudo_dependencies": [', ", ".join(s for _, s in pseudo_deps), "]"]
        parts.append("}")
        version_str = "".join(parts)
        md5 = hashlib.md5(version_str.encode()).hexdigest()
        hashed = md5[:6]
        output_path = self._under_prefix(step.name + "-" + hashed)
        if step.override_output_path is not None:
            override = make_prefix_absolute_path(self.prefix, step.override_output_path)
            if override != output_path:
                self.override_mismatches.append((step, output_path, override))
            output_path = override

        if md5 not in self._canonical_by_md5:  # the same version string (a full md5 stands for it)
            self.steps.append(step)
            self._canonical_by_md5[md5] = step
        else:
            self.duplicate_names.add(step.name)
        self._md5[step] = md5

        self.configs.defer(step, step.config, output_path)  # type: ignore[attr-defined]
        blocking = [self.canonicalize(d) for d in collected.dependencies]
        self.dependencies[step] = blocking
        self.pseudo_dependencies[step] = [self.canonicalize(d) for d in collected.pseudo_dependencies]
        self.versions[step] = version
        self._step_by_version_id[id(version)] = step
        self.version_strs[step] = version_str
        self.hashed_versions[step] = hashed
        self.output_paths[step] = output_path
        self.is_pseudo_dep[step] = pseudo
        self.depth[step] = 1 + max(self.depth[d] for d in blocking) if blocking else 0
