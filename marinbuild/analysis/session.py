"""A build session: the workspace, its settings, the loaded targets and their steps.

What the CLI's commands share: find the workspace, decide the prefix, load and analyse what the patterns need, and hand
the engine the steps. Nothing here prints or imports the Marin facade."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marinbuild.core.gc_control import gc_paused
from marinbuild.engine import Engine
from marinbuild.engine.settings import Settings
from marinbuild.load.sources import StatCache
from marinbuild.load.workspace import Workspace, find_workspace

if TYPE_CHECKING:
    from marinbuild.analysis.analyze import Analysis
    from marinbuild.core.labels import Label
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.load import LoadedWorkspace, Loader


@dataclass
class Session:
    workspace: Workspace
    settings: Settings
    loader: Loader
    loaded: LoadedWorkspace | None = None
    labels: list[Label] = field(default_factory=list)
    analysis: Analysis | None = None
    engine: Engine | None = None

    @classmethod
    def open(cls, start: str | os.PathLike[str] = ".", **settings: Any) -> Session:
        """The session of the workspace around ``start``; ``settings``: ``Settings.resolve``'s keywords."""
        from marinbuild.load import Loader  # lazy: the loader and the analysis load starlark

        workspace = find_workspace(start)
        return cls(workspace, Settings.resolve(workspace, **settings), Loader(workspace))

    def current_package(self) -> str:
        """The working directory's package (relative to the root; "" outside), for relative patterns."""
        try:
            rel = Path.cwd().resolve().relative_to(self.workspace.root)
        except ValueError:
            return ""
        return "" if str(rel) == "." else rel.as_posix()

    def load(self, patterns: Iterable[str]) -> list[Label]:
        """Load what ``patterns`` need (``-PATTERN`` subtracts); BuildFileError/LabelError on mistakes."""
        self.loaded, self.labels = self.loader.load_patterns(list(patterns), self.current_package())
        return self.labels

    def load_all(self) -> LoadedWorkspace:
        self.loaded = self.loader.load_all()
        return self.loaded

    def analyse(self, labels: Iterable[Label] | None = None, *, drop_declarations: bool = False) -> Analysis:
        """Turn the targets (and their dependencies) into steps and compute every version.

        ``drop_declarations``: drop every loaded target's attributes and call site once the steps are made
        (``Target.drop_declaration``), for a caller that reads neither again (the build flow); the loader keeps the same
        objects, so a later ``load`` of this session gives them dropped too."""
        from marinbuild.analysis.analyze import analyze

        assert self.loaded is not None, "load first"
        roots = list(self.labels if labels is None else labels)
        cache = StatCache(self.workspace.stat_cache_path)
        with gc_paused():  # a config, a step and their placeholders per target: many objects, no cyclic garbage
            self.analysis = analyze(self.loaded, roots, self.workspace, cache)
        cache.save()
        if drop_declarations:
            for target in self.loaded.targets.values():
                target.drop_declaration()
        self.engine = Engine(self.settings, listeners=[])
        self.engine.add_all([step for label in roots for step in self.analysis.steps_of[label]])
        return self.analysis

    def steps_of(self, label: Label) -> list[ExecutorStep]:
        assert self.analysis is not None and self.engine is not None
        return [self.engine.canonicalize(s) for s in self.analysis.steps_of[label]]

    def output_paths_of(self, label: Label) -> list[str]:
        assert self.engine is not None
        return [self.engine.output_paths[s] for s in self.steps_of(label)]

    def requested_steps(self) -> list[ExecutorStep]:
        assert self.analysis is not None
        return self.analysis.requested_steps(self.labels)
