"""Loading packages into a target graph: evaluation, label resolution, cycle detection.

``Loader.load_packages`` evaluates the requested packages, their ``load()`` files and (by default) every package their
labels refer to, transitively; resolves each label, reports missing packages, targets and files and dependency cycles,
and returns a ``LoadedWorkspace``. All packages' errors are collected; the first is raised with the rest in
``more_errors``. Cycles are searched for only when some dependency was declared after a target depending on it
(``Target.order``): otherwise declaration order is a topological order."""

from __future__ import annotations

import difflib
import os
import pickle
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from marinbuild.core.gc_control import gc_paused
from marinbuild.core.labels import Label, PatternError, TargetPattern, expand_patterns, parse_label, parse_pattern
from marinbuild.load.child import ChildDied, in_child
from marinbuild.load.errors import BuildFileError
from marinbuild.load.evaluator import Evaluator
from marinbuild.load.locate import keyword_location
from marinbuild.load.target import Target
from marinbuild.load.trusted import forget_failed_imports
from marinbuild.load.workspace import BUILD_FILE, Workspace, find_workspace

__all__ = ["LoadedWorkspace", "Loader", "find_cycle", "load_packages", "load_patterns", "load_workspace"]


RepoDirs = Mapping[str, str | os.PathLike[str]] | None


@dataclass
class LoadedWorkspace:
    """Loaded targets and their dependency graph (edges from a target to the targets it depends on)."""

    workspace: Workspace
    targets: dict[Label, Target]
    packages: dict[str, tuple[Label, ...]]

    @cached_property
    def graph(self) -> Any:
        """The dependency graph as a networkx ``DiGraph`` (built on first use; networkx loads only then)."""
        import networkx as nx

        graph = nx.DiGraph()
        graph.add_nodes_from(self.targets)
        for target in self.targets.values():
            graph.add_edges_from((target.label, dep) for dep in target.deps if dep in self.targets)
        return graph

    def __len__(self) -> int:
        return len(self.targets)

    def __contains__(self, label: object) -> bool:
        return label in self.targets

    def __getitem__(self, label: Label | str) -> Target:
        return self.target(label)

    def target(self, label: Label | str) -> Target:
        key = parse_label(label) if isinstance(label, str) else label
        try:
            return self.targets[key]
        except KeyError:
            raise KeyError(f"target {key} is not loaded") from None

    def deps(self, label: Label | str) -> tuple[Label, ...]:
        return self.target(label).deps

    def labels_by_package(self) -> dict[str, list[str]]:
        return {pkg: [label.name for label in labels] for pkg, labels in self.packages.items()}

    def expand(self, patterns: Iterable[str | TargetPattern], current_package: str = "") -> list[Label]:
        """``expand_patterns`` over the loaded packages, as the loaded targets' own label objects (a build keeps the
        labels it was asked for; copies were ~3% of a 100,000-target build's peak memory)."""
        targets = self.targets
        return [
            targets[label].label if label in targets else label
            for label in expand_patterns(patterns, self.labels_by_package(), current_package)
        ]

    def closure(self, roots: Iterable[Label | str]) -> list[Label]:
        """``roots`` and everything they depend on, dependencies before dependents (deterministic)."""
        order: list[Label] = []
        done: set[Label] = set()
        targets = self.targets
        for root in roots:
            start = parse_label(root) if isinstance(root, str) else root
            if start not in targets:
                raise KeyError(f"target {start} is not loaded")
            if start in done:
                continue
            stack: list[tuple[Label, tuple[Label, ...], int]] = [(start, targets[start].deps, 0)]
            done.add(start)
            while stack:
                node, deps, i = stack[-1]
                if i < len(deps):
                    stack[-1] = (node, deps, i + 1)
                    dep = deps[i]
                    if dep not in done:
                        done.add(dep)
                        stack.append((dep, targets[dep].deps if dep in targets else (), 0))
                else:
                    stack.pop()
                    order.append(node)
        return order


class Loader:
    """A loading session over ``workspace``; ``repo_dirs`` overrides repository folders."""

    def __init__(self, workspace: Workspace, *, repo_dirs: RepoDirs = None) -> None:
        self.workspace = workspace
        self.evaluator = Evaluator(workspace, {k: Path(v) for k, v in (repo_dirs or {}).items()})
        self._packages: dict[str, dict[str, Target]] = {}
        self._failed: dict[str, BuildFileError] = {}
        self._is_package: dict[str, bool] = {}
        self._files: dict[tuple[str, str], tuple[Path | None, str | None]] = {}
        self._unordered = False  # whether a dependency was declared after a target depending on it

    def is_package(self, package: str) -> bool:
        known = self._is_package.get(package)
        if known is None:
            known = self._is_package[package] = self.workspace.is_package(package)
        return known

    def load_all(self) -> LoadedWorkspace:
        """Every package of the workspace (``//...``)."""
        return self.load_packages(self.workspace.packages())

    def load_patterns(
        self, patterns: Iterable[str | TargetPattern], current_package: str = ""
    ) -> tuple[LoadedWorkspace, list[Label]]:
        """Load the packages ``patterns`` need and expand them; returns the loaded graph and the selected labels."""
        parsed = [p if isinstance(p, TargetPattern) else parse_pattern(p, current_package) for p in patterns]
        needed: list[str] = []
        for pattern in parsed:
            if pattern.kind == "recursive":
                if not pattern.negative:
                    needed.extend(self.workspace.packages(pattern.package))
            elif self.is_package(pattern.package):
                needed.append(pattern.package)
            else:
                raise PatternError(
                    f"no such package '{pattern.package}' (pattern {pattern.text!r}): it has no {BUILD_FILE} file"
                )
        loaded = self.load_packages(needed)
        return loaded, loaded.expand(parsed, current_package)

    def load_packages(self, packages: Iterable[str], *, transitive: bool = True) -> LoadedWorkspace:
        """Load ``packages`` (and, if ``transitive``, every package their labels refer to).

        The walk (``_Walk``) runs in a Starlark child process (``child``) and, in step, here on the outcomes it sends. A
        child that dies or overruns fails the package it was evaluating and a new child walks on; one that stops to have
        a rules module imported here (``trusted``) is replaced by one that redoes that package. The cyclic collector is
        paused meanwhile: loading allocates about eight tracked objects per target and frees almost none, so collections
        would find nothing while walking every object of the process."""
        packages = list(dict.fromkeys(packages))
        with gc_paused():
            return self._load_packages(packages, transitive)

    def _load_packages(self, packages: list[str], transitive: bool) -> LoadedWorkspace:
        for package in packages:
            if not self.is_package(package):
                raise PatternError(
                    f"no such package '{package}': "
                    f"{self.workspace.display(self.workspace.build_file(package))} does not exist"
                )
        forget_failed_imports()
        walk = _Walk(self, packages, transitive)
        while walk.package is not None:
            for outcome in in_child(walk.evaluate, self.evaluator.budget):
                if isinstance(outcome, ChildDied):
                    outcome = BuildFileError(self.evaluator.build_file_paths(walk.package)[1], 1, 1, outcome.message)
                walk.record(outcome)
        errors = [*self._failed.values(), *self._resolve()]
        result = self._result()
        if not errors and self._unordered:  # else declaration order is a topological order: no cycle
            cycle = find_cycle(result.targets)
            if cycle:
                chain = " -> ".join(str(x) for x in [*cycle, cycle[0]])
                errors.append(BuildFileError.at(result.targets[cycle[0]].location, f"dependency cycle: {chain}"))
        if errors:
            unique = {(e.path, e.line, e.col, e.message): e for e in errors}  # packages sharing a broken load()
            errors = sorted(unique.values(), key=lambda e: (e.path, e.line, e.col))
            errors[0].more_errors = tuple(errors[1:])
            raise errors[0]
        return result

    def _resolve(self) -> list[BuildFileError]:
        errors: list[BuildFileError] = []
        self._unordered = False
        for package in sorted(self._packages):
            for target in self._packages[package].values():
                try:
                    self._resolve_target(target)
                except BuildFileError as exc:
                    errors.append(exc)
        return errors

    def _target_not_files(self, target: Target, attr_name: str, label: Label) -> BuildFileError:
        """The error for a target's label given to an attribute that takes source files."""
        return self._ref_error(
            target, attr_name, label, f"'{label}' is a target, but attribute {attr_name!r} takes source files"
        )

    def _resolve_target(self, target: Target) -> None:
        deps: list[Label] = []
        srcs: list[Label] = []
        paths: list[Path] = []
        packages = self._packages
        files = self._files
        specs = target.rule.attrs
        order = target.order
        for attr_name, label in target.label_refs():
            other = label.package
            targets = packages.get(other)
            if targets is not None:
                dep = targets.get(label.name)
                if dep is not None:
                    if specs[attr_name].requires_files:
                        raise self._target_not_files(target, attr_name, label)
                    deps.append(label)
                    if dep.order >= order:
                        self._unordered = True
                    continue
            elif other in self._failed:
                continue
            elif not self.is_package(other):
                raise self._ref_error(target, attr_name, label, _missing_package(self.workspace, label))
            else:
                if specs[attr_name].requires_files:
                    raise self._target_not_files(target, attr_name, label)
                deps.append(label)  # a target in a package not loaded (not transitive): taken on trust
                continue
            known = files.get((other, label.name))
            path, owner = known if known is not None else self._source_file(other, label.name)
            if owner is not None:
                raise self._ref_error(
                    target,
                    attr_name,
                    label,
                    f"'{label}' crosses into package '{owner}': "
                    f"write '//{owner}:{_relative(label.name, other, owner)}'",
                )
            if path is not None:
                srcs.append(label)
                paths.append(path)
                continue
            close = difflib.get_close_matches(label.name, list(targets), n=1)
            hint = f" (did you mean ':{close[0]}'?)" if close else ""
            raise self._ref_error(
                target,
                attr_name,
                label,
                f"no such target '{label}': package '{other}' declares no target {label.name!r} "
                f"and has no file {label.name!r}{hint}",
            )
        if len(set(deps)) != len(deps):
            deps = list(dict.fromkeys(deps))
        target.deps = tuple(deps)
        if len(set(srcs)) != len(srcs):
            unique = dict(zip(srcs, paths, strict=True))  # a label's path is the same wherever it is written
            srcs, paths = list(unique), list(unique.values())
        target.srcs = tuple(srcs)
        target.source_paths = tuple(paths)
        target._refs = None  # label_refs() makes them again if asked: not kept, nor walked by the collector

    def _source_file(self, package: str, name: str) -> tuple[Path | None, str | None]:
        """``(path, None)``, ``(None, owner)`` for a file of sub-package ``owner``, or ``(None, None)``; cached."""
        key = (package, name)
        hit = self._files.get(key)
        if hit is None:
            base = os.path.join(self.workspace.root, package)
            parts = name.split("/")
            owner = None
            for i in range(len(parts) - 1, 0, -1):
                if os.path.isfile(os.path.join(base, *parts[:i], BUILD_FILE)):
                    owner = "/".join([package, *parts[:i]]) if package else "/".join(parts[:i])
                    break
            full = os.path.join(base, *parts)
            path = Path(full) if owner is None and os.path.isfile(full) else None
            hit = self._files[key] = (path, owner)
        return hit

    def _ref_error(self, target: Target, attr_name: str, label: Label, message: str) -> BuildFileError:
        location = keyword_location(target.location, str(self.workspace.root / target.location.path), attr_name)
        return BuildFileError.at(location, f"{message} (in attribute {attr_name!r} of {target.label})")

    def _result(self) -> LoadedWorkspace:
        loaded = sorted(self._packages.items())
        targets = {target.label: target for _, package in loaded for target in package.values()}
        packages = {name: tuple(target.label for target in package.values()) for name, package in loaded}
        return LoadedWorkspace(self.workspace, targets, packages)


class _Walk:
    """The packages a load evaluates: those asked for, then (if transitive) those they refer to, skipping loaded ones.
    The child (``evaluate``) and the parent (``record``) step through the same outcomes, so they agree."""

    def __init__(self, loader: Loader, packages: list[str], transitive: bool) -> None:
        self.loader, self.queue, self.seen, self.transitive = loader, packages, set(packages), transitive
        self.i = 0
        self.record(None)

    @property
    def package(self) -> str | None:
        return self.queue[self.i] if self.i < len(self.queue) else None

    def evaluate(self, send: Callable[[dict[str, Target] | BuildFileError], None]) -> None:
        """In the child: evaluate each package left, sending its targets or its error."""
        while self.package is not None:
            try:
                outcome: dict[str, Target] | BuildFileError = self.loader.evaluator.eval_build_file(self.package)
            except BuildFileError as exc:
                outcome = exc
            try:
                send(outcome)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:  # made by a rules module's attribute type
                outcome = _unpicklable(outcome, exc)
                send(outcome)
            self.record(outcome)

    def record(self, outcome: dict[str, Target] | BuildFileError | None) -> None:
        """Keep ``outcome``, the current package's, and move on to the next package to evaluate."""
        loader = self.loader
        if isinstance(outcome, BuildFileError):
            loader._failed[self.queue[self.i]] = outcome
        elif outcome is not None:
            loader._packages[self.queue[self.i]] = outcome
        while self.i < len(self.queue):
            package = self.queue[self.i]
            if package not in loader._packages and package not in loader._failed:
                break
            if self.transitive and package in loader._packages:
                for target in loader._packages[package].values():
                    for _attr, label in target.label_refs():
                        other = label.package
                        if other not in self.seen and not label.repo and loader.is_package(other):
                            self.seen.add(other)
                            self.queue.append(other)
            self.i += 1


def _unpicklable(outcome: dict[str, Target] | BuildFileError, exc: Exception) -> BuildFileError:
    """The error of targets that do not pickle: at the first whose attributes do not."""
    for target in outcome.values() if isinstance(outcome, dict) else ():
        try:
            pickle.dumps(target)
        except Exception:
            return BuildFileError.at(
                target.location,
                f"{target.kind}(name={target.name!r}): a value of its attributes does not pickle ({exc}): a rules "
                "module's attribute type must make values that do (see docs/rules.md)",
            )
    raise exc


def find_cycle(targets: Mapping[Label, Target]) -> list[Label]:
    """A dependency cycle among ``targets`` from its smallest label, or ``[]`` (``nx.find_cycle`` is slow)."""
    on_path: dict[Label, int] = {}
    done: set[Label] = set()
    for root in targets:
        if root in done:
            continue
        path = [root]
        on_path[root] = 0
        stack = [iter(targets[root].deps)]
        while stack:
            for dep in stack[-1]:
                if dep in on_path:
                    cycle = path[on_path[dep] :]
                    start = cycle.index(min(cycle))
                    return cycle[start:] + cycle[:start]
                if dep in done or dep not in targets:
                    continue
                on_path[dep] = len(path)
                path.append(dep)
                stack.append(iter(targets[dep].deps))
                break
            else:
                stack.pop()
                node = path.pop()
                del on_path[node]
                done.add(node)
    return []


def _missing_package(workspace: Workspace, label: Label) -> str:
    parts = label.package.split("/")
    message = f"no such package '{label.package}': it has no {BUILD_FILE} file"
    for i in range(len(parts) - 1, -1, -1):
        if workspace.is_package(parent := "/".join(parts[:i])):
            rest = "/".join([*parts[i:], label.name])
            return f"{message} (if you meant the file in package '{parent}', write '//{parent}:{rest}')"
    return message


def _relative(name: str, package: str, owner: str) -> str:
    inner = owner[len(package) + 1 :] if package else owner
    return name[len(inner) + 1 :]


def load_workspace(root: str | os.PathLike[str] = ".", *, repo_dirs: RepoDirs = None) -> LoadedWorkspace:
    """Load every package of the workspace containing ``root`` (found with ``find_workspace``)."""
    return Loader(find_workspace(root), repo_dirs=repo_dirs).load_all()


def load_packages(
    workspace: Workspace, packages: Iterable[str], *, transitive: bool = True, repo_dirs: RepoDirs = None
) -> LoadedWorkspace:
    """Load ``packages`` of ``workspace`` (plus their ``load()`` files and, if ``transitive``, referenced packages)."""
    return Loader(workspace, repo_dirs=repo_dirs).load_packages(packages, transitive=transitive)


def load_patterns(
    workspace: Workspace,
    patterns: Iterable[str | TargetPattern],
    current_package: str = "",
    *,
    repo_dirs: RepoDirs = None,
) -> tuple[LoadedWorkspace, list[Label]]:
    """Load what ``patterns`` need and return the loaded graph and the selected labels, in order."""
    return Loader(workspace, repo_dirs=repo_dirs).load_patterns(patterns, current_package)
