"""Versions, version strings, hashes and output paths of steps, exactly as Marin computes them.

A step's version is ``{"name", "config" (its versioned values), "dependencies": [...]}``
(plus ``"pseudo_dependencies"`` when it has any); a dependency deeper than 4 levels is
written as ``"name-hash"``. The version string is ``json.dumps(version, sort_keys=True)``
and the output path ``<prefix>/<name>-<md5(version_str)[:6]>``.

What differs from Marin, none of it visible in the results (``tests/test_compat_vectors.py``):
- the walk is iterative, so a 10,000-step chain does not hit Python's recursion limit;
- a version string is composed from its dependencies' already-computed strings instead
  of serialising every nested version again for each consumer (byte-identical, because
  ``json.dumps`` of a nested sorted dict is the nested dict's own sorted dump).
The tables are plain dicts, filled as each step is versioned; a config is instantiated when first read
(``Configs``), not as its version is recorded as Marin does: a no-op reads none.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from marinbuild.core.gc_control import gc_paused
from marinbuild.core.jsonenc import dumps_indented, dumps_sorted, json_str
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.walk import collect_dependencies_and_version, instantiate_config, make_prefix_absolute_path

MAX_INLINE_DEPTH = 4
"""Dependencies whose chain depth is at most this are inlined into a consumer's version."""


class VersionCycleError(ValueError):
    """A step's config refers, through other steps, back to itself."""


class Configs(Mapping[ExecutorStep, Any]):
    """Marin's ``Executor.configs``: each versioned step's config with its placeholders resolved, made when first
    read (a build that runs nothing reads none; Marin makes each as it versions the step)."""

    def __init__(self, table: VersionTable):
        self._table = table
        self._made: dict[ExecutorStep, Any] = {}

    def __getitem__(self, step: ExecutorStep) -> Any:
        if step not in self._made:
            paths = self._table.output_paths
            self._made[step] = instantiate_config(step.config, paths[step], paths, self._table.prefix)
        return self._made[step]

    def __contains__(self, step: object) -> bool:
        return step in self._table.output_paths

    def __iter__(self) -> Iterator[ExecutorStep]:
        return iter(self._table.output_paths)

    def __len__(self) -> int:
        return len(self._table.output_paths)


class VersionTable:
    """Everything Marin's ``Executor`` records per step while computing versions.

    The attributes have Marin's names and meanings; ``steps`` lists one step per distinct
    version, in the order Marin would list them (dependencies before consumers).
    """

    def __init__(self, prefix: str):
        self.prefix = prefix
        self.steps: list[ExecutorStep] = []
        self.output_paths: dict[ExecutorStep, str] = {}
        self.configs = Configs(self)
        self.dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.pseudo_dependencies: dict[ExecutorStep, list[ExecutorStep]] = {}
        self.versions: dict[ExecutorStep, dict[str, Any]] = {}
        self.version_strs: dict[ExecutorStep, str] = {}
        self.version_str_to_step: dict[str, ExecutorStep] = {}
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
        """Compute versions and paths of ``step`` and everything it depends on (post-order, no recursion)."""
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
        """The sha256 of the step's version string (``marinbuild.store.action_cache.version_digest``): the plan and
        the runner key actions by it."""
        return hashlib.sha256(self.version_strs[step].encode()).hexdigest()

    def indented_version(self, step: ExecutorStep, depth: int = 0) -> str:
        """``json.dumps(self.versions[step], indent=2)``, as it reads nested ``depth`` levels deep."""
        return dumps_indented(self.versions[step], depth)

    def _unmark_pseudo(self, step: ExecutorStep) -> None:
        """A step reached through a blocking edge is not pseudo, nor are its blocking dependencies."""
        todo = [step]
        while todo:
            s = todo.pop()
            if self.is_pseudo_dep.get(s):
                self.is_pseudo_dep[s] = False
                todo.extend(self.dependencies[s])

    def _short_form(self, dep: ExecutorStep) -> tuple[str, str]:
        """A dependency deeper than ``MAX_INLINE_DEPTH`` as its consumers write it: ``"name-hash"`` and its JSON."""
        text = f"{dep.name}-{self.hashed_versions[dep]}"
        return text, json_str(text)

    def _dep_versions(self, deps: list[ExecutorStep], parts: list[str]) -> list[Any]:
        """The dependencies as a consumer's version lists them (inlined, or ``"name-hash"`` when deeper than
        ``MAX_INLINE_DEPTH``); their JSON texts, comma-separated, are appended to ``parts``."""
        depth, versions, strs = self.depth, self.versions, self.version_strs
        listed: list[Any] = []
        for i, dep in enumerate(deps):
            if i:
                parts.append(", ")
            if depth[dep] <= MAX_INLINE_DEPTH:
                listed.append(versions[dep])
                parts.append(strs[dep])
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
        # The version string, composed from the dependencies' strings.
        parts = ['{"config": ', dumps_sorted(collected.version), ', "dependencies": [']
        dep_versions = self._dep_versions(collected.dependencies, parts)
        parts.extend(['], "name": ', json_str(step.name)])
        version: dict[str, Any] = {"name": step.name, "config": collected.version, "dependencies": dep_versions}
        if collected.pseudo_dependencies:
            parts.append(', "pseudo_dependencies": [')
            version["pseudo_dependencies"] = self._dep_versions(collected.pseudo_dependencies, parts)
            parts.append("]")
        parts.append("}")
        version_str = "".join(parts)
        md5 = hashlib.md5(version_str.encode()).hexdigest()
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
            self.version_str_to_step[version_str] = step
        else:
            self.duplicate_names.add(step.name)
        self._canonical[step] = canonical

        self.dependencies[step] = blocking
        self.pseudo_dependencies[step] = [canonical_of[d] for d in collected.pseudo_dependencies]
        versions[step] = version
        self.version_strs[step] = version_str
        self.hashed_versions[step] = hashed
        self.output_paths[step] = output_path
        self.is_pseudo_dep[step] = pseudo
        depth[step] = step_depth
