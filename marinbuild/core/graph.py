"""The step graph: canonical steps as nodes, dependency edges (pseudo-dependencies are hashed into the version,
never waited for). Every walk is iterative, over the version table's plain adjacency lists."""

from __future__ import annotations

import re
from collections.abc import Iterable

from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.versions import VersionTable


class StepGraph:
    """Distinct steps (one per version) and the edges between them."""

    def __init__(self, table: VersionTable):
        self.table = table

    def blocking_deps(self, step: ExecutorStep) -> list[ExecutorStep]:
        return self.table.dependencies[step]

    def blocking_closure(self, roots: Iterable[ExecutorStep]) -> list[ExecutorStep]:
        """``roots`` and every step they transitively block on, dependencies first."""
        seen: set[ExecutorStep] = set()
        stack = [self.table.canonicalize(r) for r in roots]
        while stack:
            step = stack.pop()
            if step not in seen:
                seen.add(step)
                stack.extend(self.table.dependencies[step])
        return [s for s in self.table.steps if s in seen]

    def select(self, patterns: list[str]) -> tuple[list[ExecutorStep], list[str]]:
        """Steps whose name matches any regex (``re.search``), and the patterns that matched nothing."""
        regexes = [re.compile(p) for p in patterns]
        used: set[int] = set()
        selected = []
        for step in self.table.steps:
            for i, regex in enumerate(regexes):
                if regex.search(step.name):
                    used.add(i)
                    selected.append(step)
                    break
        return selected, [p for i, p in enumerate(patterns) if i not in used]
