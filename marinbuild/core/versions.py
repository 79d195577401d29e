"""Versions, version strings, hashes and output paths of steps, exactly as Marin computes them.

A step's version is ``{"name", "config" (its versioned values), "dependencies": [...]}``
(plus ``"pseudo_dependencies"`` when it has any); a dependency deeper than 4 levels is
written as ``"name-hash"``. The version string is ``json.dumps(version, sort_keys=True)``
and the output path ``<prefix>/<name>-<md5(version_str)[:6]>``.

What differs from Marin, none of it visible in the results (``tests/test_compat_vectors.py``):
- the walk is iterative, so a 10,000-step chain does not hit Python's recursion limit;
- a version string is composed from its dependencies' already-computed strings instead
  of serialising every nested version again for each consumer (byte-identical, because
  ``json.dumps`` of a nested sorted dict is the nested dict's own sorted dump);
- a long version string is kept as those pieces, unjoined, with references to its
  dependencies' pieces (``VersionBytes``); ``version_strs`` decodes a string when it is read
  (``VersionStrs``);
- an ``.executor_info`` text refers to each dependency's already-indented version at its line's
  indentation (``IndentedText``, ``dumps_indented_with``), and is joined only when written.
The last two earn their complexity on ``bench/versions_bench.py``'s rows (peak memory, and
the time a cold build spends on info texts); configs are instantiated as versions are
recorded, as Marin does, since deferring them saved little.
"""

from __future__ import annotations

import abc
import gc
import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from marinbuild.core.gc_control import gc_paused
from marinbuild.core.jsonenc import dumps_indented, dumps_sorted, json_str
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.walk import collect_dependencies_and_version, instantiate_config, make_prefix_absolute_path

MAX_INLINE_DEPTH = 4
"""Dependencies whose chain depth is at most this are inlined into a consumer's version."""
JOIN_UNDER = 4096
"""A version string at most this long is kept as one joined piece; a longer one as references to its pieces
(``VersionBytes``)."""


_SLOT = "\u0000marinbuild-slot-"
_SLOT_RE = re.compile(r'^( *)((?:"(?:[^"\\\n]|\\.)*": )?)"\\u0000marinbuild-slot-(\d+)"', re.MULTILINE)
"""A slot string on its line: the line's indentation, the dict key before it if any, the slot's number."""


class IndentedText:
    """``json.dumps(version, indent=2)`` kept as the version's own text with references to the texts of the
    versions it inlines, each to go in at its line's indentation: ``parts`` are strings, and (indentation, text)
    pairs, the text an ``IndentedText`` or a string. Joined, a consumer's text would copy each inlined
    dependency's text (itself nesting its own, up to ``MAX_INLINE_DEPTH`` levels), and a cold build holds the
    texts of the steps whose consumers have not run yet (``bench/run.py``'s layered cold row, peak memory)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[str | tuple[str, IndentedText | str]]):
        self.parts = parts

    def render(self, pad: str = "") -> str:
        """The text, with ``pad`` after every newline (as when it goes in at that indentation)."""
        out: list[str] = []
        _render_into(self, pad, out)
        return "".join(out)


def _render_into(text: IndentedText | str, pad: str, out: list[str]) -> None:
    if isinstance(text, str):
        out.append(text.replace("\n", "\n" + pad) if pad else text)
        return
    for part in text.parts:
        if isinstance(part, str):
            out.append(part.replace("\n", "\n" + pad) if pad else part)
        else:
            inner_pad, inner = part
            _render_into(inner, pad + inner_pad, out)


def dumps_indented_with(obj: Any, slots: list[IndentedText | str]) -> IndentedText:
    """``json.dumps(obj, indent=2)`` where each string ``slot(i)`` in ``obj`` stands for the
    already-indented JSON text ``slots[i]``: big shared sub-documents are encoded once, and referred to,
    not copied. A slot's text goes in at its line's indentation, whether it is a list item or a dict value."""
    text = dumps_indented(obj)
    parts: list[str | tuple[str, IndentedText | str]] = []
    last = 0
    for match in _SLOT_RE.finditer(text):
        pad = match.group(1)
        parts.append(text[last : match.start()] + pad + match.group(2))
        parts.append((pad, slots[int(match.group(3))]))
        last = match.end()
    parts.append(text[last:])
    return IndentedText(parts)


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
            for step in steps[self._synced :]:
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


class VersionBytes(Mapping[ExecutorStep, bytes]):
    """``step -> version string as ASCII bytes``, a read-only view of the table's pieces. A version string nests
    its inlined dependencies' strings, so in a wide graph the same text recurs in thousands of consumers (a step
    of a layered graph just above the inlining depth nests ~360 versions). A short string (``JOIN_UNDER``) is kept
    joined; a longer one as the flat tuple of its pieces: its own fragments and references to the pieces of the
    dependencies it inlines, nothing copied. Joined here on each read, never kept: the strings are read only to be
    hashed (piece by piece) or written (the run info streams the pieces)."""

    def __init__(self, pieces: dict[ExecutorStep, tuple[bytes, ...]]):
        self._pieces = pieces

    def __getitem__(self, step: ExecutorStep) -> bytes:
        pieces = self._pieces[step]
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def __contains__(self, step: object) -> bool:
        return step in self._pieces

    def __iter__(self) -> Iterator[ExecutorStep]:
        return iter(self._pieces)

    def __len__(self) -> int:
        return len(self._pieces)


class VersionStrs(_CompletedOnRead):
    """Marin's ``version_strs`` (step -> version string), decoded on first read from the ASCII bytes the
    engine hashes: a no-op build of 10,000 steps hashes tens of MB of version text and reads little of it."""

    def __init__(self, source: Mapping[ExecutorStep, bytes]):
        super().__init__()
        self._source = source

    def __missing__(self, step: ExecutorStep) -> str:
        text = self._source[step].decode("ascii")  # KeyError for unknown steps, as a dict
        dict.__setitem__(self, step, text)
        return text

    def _complete(self) -> None:
        if dict.__len__(self) < len(self._source):
            for step in self._source:
                if not dict.__contains__(self, step):
                    self[step]

    def get(self, step: Any, default: Any = None) -> Any:
        return self[step] if step in self._source else default

    def __contains__(self, step: object) -> bool:
        return step in self._source

    def __len__(self) -> int:
        return len(self._source)


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
        self.configs: dict[ExecutorStep, Any] = {}
        self.dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.pseudo_dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.versions: dict[ExecutorStep, dict[str, Any]] = {}
        self.version_pieces: dict[ExecutorStep, tuple[bytes, ...]] = {}
        """Each version string as the ASCII byte pieces it is hashed from: one joined piece for a step consumers
        inline, the unjoined pieces for a deeper one (see ``VersionBytes``)."""
        self.version_bytes: Mapping[ExecutorStep, bytes] = VersionBytes(self.version_pieces)
        """Each version string as ASCII bytes (joined on read for deep steps)."""
        self.version_strs: dict[ExecutorStep, str] = VersionStrs(self.version_bytes)
        self._action_digests: dict[ExecutorStep, str] = {}
        self.version_str_to_step: dict[str, ExecutorStep] = VersionStrIndex(self)
        self._canonical_by_md5: dict[str, ExecutorStep] = {}
        self._canonical: dict[ExecutorStep, ExecutorStep] = {}
        self._short: dict[ExecutorStep, tuple[str, bytes]] = {}
        self.hashed_versions: dict[ExecutorStep, str] = {}
        self.is_pseudo_dep: dict[ExecutorStep, bool] = {}
        self.depth: dict[ExecutorStep, int] = {}
        self.duplicate_names: set[str] = set()
        self._indented: dict[ExecutorStep, IndentedText | str] = {}
        self._readers: dict[ExecutorStep, int] = {}
        """How many consumers inline each step's version and have not composed their text yet: a step's memoized
        text is dropped once the last one has (``bench/run.py``'s layered cold row: what a cold build holds)."""
        self._step_by_version_id: dict[int, ExecutorStep] = {}
        self.override_mismatches: list[tuple[ExecutorStep, str, str]] = []
        self.recorded: set[ExecutorStep] = set()
        """Read by the engine's run-info splice only; never filled (goes with the splice)."""
        self._prefix_slash = (prefix if prefix.endswith("/") else prefix + "/") if prefix else None

    def canonicalize(self, step: ExecutorStep) -> ExecutorStep:
        """The step that stands for every step with the same version."""
        return self._canonical[step]

    def compute_version(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        """Compute versions and paths of ``step`` and everything it depends on (post-order, no recursion)."""
        if not gc.isenabled():  # inside Engine.run's pause: no context manager per step
            self._compute(step, is_pseudo_dep)
            return
        with gc_paused():
            self._compute(step, is_pseudo_dep)

    def _compute(self, step: ExecutorStep, is_pseudo_dep: bool) -> None:
        versions = self.versions
        if step in versions:
            if not is_pseudo_dep and self.is_pseudo_dep[step]:
                self._unmark_pseudo(step)
            return
        collected = collect_dependencies_and_version(step.config)
        # The common case: a script lists steps after what they depend on, so every dependency is done already.
        for dep in collected.dependencies:
            if dep not in versions:
                break
        else:
            for dep in collected.pseudo_dependencies:
                if dep not in versions:
                    break
            else:
                if not is_pseudo_dep:
                    is_pseudo = self.is_pseudo_dep
                    for dep in collected.dependencies:
                        if is_pseudo[dep]:
                            self._unmark_pseudo(dep)
                self._record(step, is_pseudo_dep, collected)
                return
        self._compute_walk(step, is_pseudo_dep, collected)

    def _compute_walk(self, step: ExecutorStep, is_pseudo_dep: bool, collected: Any) -> None:
        """Post-order over the dependencies not done yet, with an explicit stack (no recursion)."""
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
                if collected is None:
                    collected = collect_dependencies_and_version(current.config)
                frame[2] = collected
                frame[3] = [(d, pseudo) for d in collected.dependencies] + [
                    (d, True) for d in collected.pseudo_dependencies
                ]
                collected = None
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

    def action_digest(self, step: ExecutorStep) -> str:
        """The sha256 of the step's version string (``marinbuild.store.action_cache.version_digest``), hashed from
        its pieces once per build: the plan and the runner key actions by it."""
        digest = self._action_digests.get(step)
        if digest is None:
            sha = hashlib.sha256()
            for piece in self.version_pieces[step]:
                sha.update(piece)
            digest = self._action_digests[step] = sha.hexdigest()
        return digest

    def indented_version(self, step: ExecutorStep, pad: str = "") -> str:
        """``json.dumps(self.versions[step], indent=2)`` (with ``pad`` after every newline), composed from the
        dependencies' texts (``indented_text``)."""
        text = self.indented_text(step)
        if isinstance(text, str):
            return text.replace("\n", "\n" + pad) if pad else text
        return text.render(pad)

    def indented_text(self, step: ExecutorStep) -> IndentedText | str:
        """The step's ``IndentedText``; kept only for a step consumers inline (a deeper one is written once, into
        its own ``.executor_info``), until the last of them has composed its own."""
        text = self._indented.get(step)
        if text is not None:
            return text
        version = self.versions[step]
        slots: list[IndentedText | str] = []
        shell: dict[str, Any] = {}
        inlined: list[ExecutorStep] = []
        for key, value in version.items():
            if key in ("dependencies", "pseudo_dependencies"):
                items = []
                for dep_version in value:
                    if isinstance(dep_version, dict):
                        dep = self._step_by_version_id[id(dep_version)]
                        slots.append(self.indented_text(dep))
                        items.append(slot(len(slots) - 1))
                        inlined.append(dep)
                    else:
                        items.append(dep_version)
                shell[key] = items
            else:
                shell[key] = value
        text = dumps_indented_with(shell, slots)
        if self.depth[step] <= MAX_INLINE_DEPTH:  # only an inlined step's text goes into its consumers' texts
            self._indented[step] = text
        readers = self._readers
        for dep in inlined:  # a text asked for again after its last reader is composed again (the same text)
            left = readers.get(dep)
            if left is None:
                continue
            if left > 1:
                readers[dep] = left - 1
            else:
                del readers[dep]
                self._indented.pop(dep, None)
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

    def _short_form(self, dep: ExecutorStep) -> tuple[str, bytes]:
        """A dependency deeper than ``MAX_INLINE_DEPTH`` as its consumers write it: ``"name-hash"`` and its JSON."""
        short = self._short.get(dep)
        if short is None:
            text = f"{dep.name}-{self.hashed_versions[dep]}"
            short = self._short[dep] = (text, json_str(text).encode())
        return short

    def _dep_versions(self, deps: list[ExecutorStep], parts: list[bytes]) -> list[Any]:
        """The dependencies as a consumer's version lists them (inlined, or ``"name-hash"`` when deeper than
        ``MAX_INLINE_DEPTH``); their JSON texts, comma-separated, are appended to ``parts``."""
        depth, versions, pieces = self.depth, self.versions, self.version_pieces
        listed: list[Any] = []
        for i, dep in enumerate(deps):
            if i:
                parts.append(b", ")
            if depth[dep] <= MAX_INLINE_DEPTH:
                listed.append(versions[dep])
                self._readers[dep] = self._readers.get(dep, 0) + 1
                parts.extend(pieces[dep])  # references to its pieces: nothing is copied
            else:
                text, encoded = self._short_form(dep)
                listed.append(text)
                parts.append(encoded)
        return listed

    def _record(self, step: ExecutorStep, pseudo: bool, collected: Any) -> None:
        depth, versions = self.depth, self.versions
        canonical_of = self._canonical
        blocking = [canonical_of[d] for d in collected.dependencies]
        step_depth = 1 + max([depth[d] for d in blocking]) if blocking else 0
        # The version string, as the one list of byte pieces it is joined from (one copy of the big pieces).
        parts = [b'{"config": ', dumps_sorted(collected.version).encode(), b', "dependencies": [']
        dep_versions = self._dep_versions(collected.dependencies, parts)
        parts.extend([b'], "name": ', json_str(step.name).encode()])
        version: dict[str, Any] = {"name": step.name, "config": collected.version, "dependencies": dep_versions}
        if collected.pseudo_dependencies:
            parts.append(b', "pseudo_dependencies": [')
            version["pseudo_dependencies"] = self._dep_versions(collected.pseudo_dependencies, parts)
            parts.append(b"]")
        parts.append(b"}")
        joined = len(parts) <= 2 or sum(map(len, parts)) <= JOIN_UNDER
        kept: tuple[bytes, ...] = (b"".join(parts),) if joined else tuple(parts)  # long: its pieces, not joined
        digest = hashlib.md5()
        for piece in kept:
            digest.update(piece)
        md5 = digest.hexdigest()
        hashed = md5[:6]
        output_path = self._under_prefix(step.name + "-" + hashed)
        if step.override_output_path is not None:
            override = make_prefix_absolute_path(self.prefix, step.override_output_path)
            if override != output_path:
                self.override_mismatches.append((step, output_path, override))
            output_path = override

        canonical = self._canonical_by_md5.setdefault(md5, step)  # the same version string (a full md5 stands for it)
        if canonical is step:
            self.steps.append(step)
        else:
            self.duplicate_names.add(step.name)
        self._canonical[step] = canonical

        self.dependencies[step] = blocking
        self.pseudo_dependencies[step] = [canonical_of[d] for d in collected.pseudo_dependencies]
        versions[step] = version
        self._step_by_version_id[id(version)] = step
        self.version_pieces[step] = kept
        self.hashed_versions[step] = hashed
        self.output_paths[step] = output_path
        self.configs[step] = instantiate_config(step.config, output_path, self.output_paths, self.prefix)
        self.is_pseudo_dep[step] = pseudo
        depth[step] = step_depth
