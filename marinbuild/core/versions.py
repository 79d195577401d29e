"""Versions, version strings, hashes and output paths of steps, exactly as Marin computes them.

A version is ``{"name", "config", "dependencies"}`` (plus ``"pseudo_dependencies"``), a dependency deeper than 4 levels
written ``"name-hash"``; the version string is ``json.dumps(version, sort_keys=True)``, the output path
``<prefix>/<name>-<md5(version_str)[:6]>``. Unlike Marin, invisibly in the results (``tests/test_compat_vectors.py``):
the walk is iterative (no recursion limit), and a version string is composed from its dependencies' strings
(byte-identical: a nested sorted dump is the nested dict's own). The tables are plain dicts but for ``configs`` and
``version_strs`` (``PerStep``), made when read, so a no-op instantiates no config."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from marinbuild.core.jsonenc import dumps_sorted, json_str
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.walk import collect_dependencies_and_version, instantiate_config, make_prefix_absolute_path

MAX_INLINE_DEPTH = 4  # Dependencies whose chain depth is at most this are inlined into a consumer's version.


class VersionCycleError(ValueError):
    """A step's config refers, through other steps, back to itself."""


class PerStep(Mapping[ExecutorStep, Any]):
    """A table column made when read: ``make(step)`` gives a versioned step's value, ``kept`` what was kept."""

    def __init__(self, table: VersionTable, make: Callable[[ExecutorStep], Any]):
        self._versions = table.versions
        self._make = make
        self.kept: dict[ExecutorStep, Any] = {}

    def __getitem__(self, step: ExecutorStep) -> Any:
        return self.kept[step] if step in self.kept else self._make(step)  # make: KeyError for a step not versioned

    def __iter__(self) -> Iterator[ExecutorStep]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)


class VersionTable:
    """Everything Marin's ``Executor`` records per step while computing versions.

    The attributes have Marin's names and meanings; ``steps`` lists one step per distinct version, in the order Marin
    would list them (dependencies before consumers)."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.steps: list[ExecutorStep] = []
        self.output_paths: dict[ExecutorStep, str] = {}
        self.dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.pseudo_dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.versions: dict[ExecutorStep, dict[str, Any]] = {}
        self.configs = PerStep(self, self._instantiate)
        self.version_strs = PerStep(self, self._compose)
        """Kept for the steps of ``depth`` below ``MAX_INLINE_DEPTH``, composed again (from those) when read for the
        others: a consumer's string holds its inlined dependencies' whole strings, so the deeper a step, the longer
        its string (every string kept was 1.4 GB at 100,000 layered steps, 90% of it those of deeper steps)."""
        self._action_digests: dict[ExecutorStep, str] = {}
        self._canonical_by_md5: dict[str, ExecutorStep] = {}
        self._canonical: dict[ExecutorStep, ExecutorStep] = {}
        self.hashed_versions: dict[ExecutorStep, str] = {}
        self.is_pseudo_dep: dict[ExecutorStep, bool] = {}
        self.depth: dict[ExecutorStep, int] = {}
        self.duplicate_names: set[str] = set()
        self.override_mismatches: list[tuple[ExecutorStep, str, str]] = []

    def canonicalize(self, step: ExecutorStep) -> ExecutorStep:
        """The step that stands for every step with the same version."""
        return self._canonical[step]

    def compute_version(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        """Compute versions and paths of ``step`` and everything it depends on (post-order, no recursion); callers
        versioning many steps pause the cyclic collector for the batch (``Engine.add_all``)."""
        versions = self.versions
        if step in versions:
            if not is_pseudo_dep and self.is_pseudo_dep[step]:
                self._unmark_pseudo(step)
            return
        collected = collect_dependencies_and_version(step.config)
        # The common case: a script lists steps after what they depend on, so every dependency is done already.
        done = versions.__contains__
        if all(map(done, collected.dependencies)) and all(map(done, collected.pseudo_dependencies)):
            if not is_pseudo_dep:
                for dep in collected.dependencies:
                    if self.is_pseudo_dep[dep]:
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
            while frame[4] < len(children):
                child, child_pseudo = children[frame[4]]
                frame[4] += 1
                if child in self.versions:  # done already: only a blocking use can unmark a pseudo step
                    if not child_pseudo and self.is_pseudo_dep[child]:
                        self._unmark_pseudo(child)
                    continue
                stack.append([child, child_pseudo, None, None, 0])
                break
            else:  # every child done: this step's turn
                stack.pop()
                on_stack.discard(id(current))
                self._record(current, pseudo, frame[2])

    def action_digest(self, step: ExecutorStep) -> str:
        """The sha256 of the step's version string, the action cache's key (taken with the md5: no-ops compose none)."""
        return self._action_digests[step]

    def _unmark_pseudo(self, step: ExecutorStep) -> None:
        """A step reached through a blocking edge is not pseudo, nor are its blocking dependencies."""
        todo = [step]
        while todo:
            s = todo.pop()
            if self.is_pseudo_dep.get(s):
                self.is_pseudo_dep[s] = False
                todo.extend(self.dependencies[s])

    def _instantiate(self, step: ExecutorStep) -> Any:
        """``step``'s config with its placeholders resolved (``configs``), kept once made."""
        paths = self.output_paths
        made = self.configs.kept[step] = instantiate_config(step.config, paths[step], paths, self.prefix)
        return made

    def _dep_versions(self, deps: list[ExecutorStep]) -> list[Any]:
        """The dependencies as a version lists them: inlined, or ``"name-hash"`` deeper than ``MAX_INLINE_DEPTH``."""
        depth, versions, hashed = self.depth, self.versions, self.hashed_versions
        return [versions[d] if depth[d] <= MAX_INLINE_DEPTH else f"{d.name}-{hashed[d]}" for d in deps]

    def _deps_json(self, deps: list[ExecutorStep]) -> str:
        """``_dep_versions(deps)``'s JSON items, from the inlined dependencies' strings."""
        depth, strs, hashed = self.depth, self.version_strs, self.hashed_versions
        return ", ".join(strs[d] if depth[d] <= MAX_INLINE_DEPTH else json_str(f"{d.name}-{hashed[d]}") for d in deps)

    def _compose(self, step: ExecutorStep, config_json: str | None = None) -> str:
        """``step``'s version string, composed from its config's JSON and its dependencies' strings."""
        version = self.versions[step]
        parts = ['{"config": ', config_json or dumps_sorted(version["config"]), ', "dependencies": [']
        parts += [self._deps_json(self.dependencies[step]), '], "name": ', json_str(step.name)]
        if "pseudo_dependencies" in version:
            parts += [', "pseudo_dependencies": [', self._deps_json(self.pseudo_dependencies[step]), "]"]
        parts.append("}")
        return "".join(parts)

    def _record(self, step: ExecutorStep, pseudo: bool, collected: Any) -> None:
        depth, versions, canonical_of = self.depth, self.versions, self._canonical
        config_json = dumps_sorted(collected.version)
        deps = [canonical_of[d] for d in collected.dependencies]
        step_depth = 1 + max([depth[d] for d in deps]) if deps else 0
        version = {"name": step.name, "config": collected.version, "dependencies": self._dep_versions(deps)}
        self.dependencies[step] = deps
        self.pseudo_dependencies[step] = [canonical_of[d] for d in collected.pseudo_dependencies]
        if collected.pseudo_dependencies:
            version["pseudo_dependencies"] = self._dep_versions(self.pseudo_dependencies[step])
        versions[step] = version
        version_str = self._compose(step, config_json)
        data = version_str.encode()
        md5 = hashlib.md5(data).hexdigest()
        self._action_digests[step] = hashlib.sha256(data).hexdigest()
        hashed = md5[:6]
        output_path = os.path.join(self.prefix, step.name + "-" + hashed)
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
        if step_depth < MAX_INLINE_DEPTH:
            self.version_strs.kept[step] = version_str
        self.hashed_versions[step] = hashed
        self.output_paths[step] = output_path
        self.is_pseudo_dep[step] = pseudo
        depth[step] = step_depth
