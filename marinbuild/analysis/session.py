"""A build session: the workspace, its settings, the loaded targets and their steps.

Everything the CLI's commands share: find the workspace, decide the prefix, load the
BUILD files a set of patterns needs, analyse the targets into steps, compute versions,
and hand the engine (``marinbuild.engine.Engine``) the steps to build. Nothing here prints; nothing
here imports the Marin facade (``marinbuild.executor``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marinbuild.core.prefix import DEFAULT_LOCAL_PREFIX
from marinbuild.load.workspace import Workspace, find_workspace
from marinbuild.run.backends import BACKEND_NAMES, LOCAL, RAY, BackendOptions, make_backend

if TYPE_CHECKING:
    from marinbuild.analysis.analyze import Analysis
    from marinbuild.core.labels import Label
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.engine import Engine
    from marinbuild.load import LoadedWorkspace, Loader


class SettingsError(ValueError):
    """A bad value in ``[tool.marinbuild]`` or on the command line (exit 2)."""


@dataclass
class Settings:
    """Where outputs go and how steps run; from flags, else the environment, else ``[tool.marinbuild]``."""

    prefix: str
    backend: str = LOCAL
    jobs: int | None = None
    keep_going: bool = False
    force_run_failed: bool = True
    heartbeat_interval: float | None = None
    stale_after: float | None = None
    ray_address: str | None = None
    """The Ray cluster of ``--backend ray``: flag, else ``RAY_ADDRESS``, else ``ray_address``; None: a local Ray."""
    ray_max_retries: int | None = None
    """Times a step's Ray task is rerun after its worker or node died (``[tool.marinbuild] ray_max_retries``)."""

    @classmethod
    def resolve(
        cls,
        workspace: Workspace,
        *,
        prefix: str | None = None,
        backend: str | None = None,
        jobs: int | None = None,
        keep_going: bool = False,
        force_run_failed: bool | None = None,
        ray_address: str | None = None,
    ) -> Settings:
        config = workspace.config
        chosen = prefix or os.environ.get("MARIN_PREFIX") or config.get("prefix") or DEFAULT_LOCAL_PREFIX
        if not isinstance(chosen, str):
            raise SettingsError("[tool.marinbuild] prefix must be a string")
        if "://" not in chosen and not os.path.isabs(chosen):
            base = Path.cwd() if prefix else workspace.root
            chosen = str((base / chosen).resolve())
        # --ray_address alone means the Ray backend (RAY_ADDRESS alone does not: it is set inside every Ray job).
        backend = backend or (RAY if ray_address else None) or config.get("backend", LOCAL)
        if backend not in BACKEND_NAMES:
            raise SettingsError(f"unknown backend {backend!r}; this build has: {', '.join(BACKEND_NAMES)}")
        if jobs is not None and jobs < 1:
            raise SettingsError(f"--jobs must be at least 1, got {jobs}")
        if force_run_failed is None:
            force_run_failed = bool(config.get("force_run_failed", True))
        ray_address = ray_address or os.environ.get("RAY_ADDRESS") or config.get("ray_address") or None
        if ray_address is not None and not isinstance(ray_address, str):
            raise SettingsError("[tool.marinbuild] ray_address must be a string")
        ray_max_retries = config.get("ray_max_retries")
        if ray_max_retries is not None and (not isinstance(ray_max_retries, int) or ray_max_retries < 0):
            raise SettingsError("[tool.marinbuild] ray_max_retries must be a non-negative integer")
        if "ray_bundle_seconds" in config:
            raise SettingsError("[tool.marinbuild] ray_bundle_seconds is not a setting: each Ray step is a task")
        return cls(
            prefix=chosen.rstrip("/") if chosen != "/" else chosen,
            backend=backend,
            jobs=jobs if jobs is not None else config.get("jobs"),
            keep_going=keep_going,
            force_run_failed=force_run_failed,
            heartbeat_interval=config.get("heartbeat_interval"),
            stale_after=config.get("stale_after"),
            ray_address=ray_address,
            ray_max_retries=ray_max_retries,
        )


def current_package(root: Path) -> str:
    """The package (folder relative to the workspace ``root``) of the working directory; "" outside it."""
    try:
        rel = Path.cwd().resolve().relative_to(root)
    except ValueError:
        return ""
    return "" if str(rel) == "." else rel.as_posix()


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
        from marinbuild.load import Loader

        workspace = find_workspace(start)
        return cls(workspace, Settings.resolve(workspace, **settings), Loader(workspace))

    def current_package(self) -> str:
        """The package of the working directory, for relative patterns (``:name``)."""
        return current_package(self.workspace.root)

    def load(self, patterns: Iterable[str]) -> list[Label]:
        """Load what ``patterns`` need (``-PATTERN`` subtracts); BuildFileError/LabelError on mistakes."""
        self.loaded, self.labels = self.loader.load_patterns(list(patterns), self.current_package())
        return self.labels

    def load_all(self) -> LoadedWorkspace:
        self.loaded = self.loader.load_all()
        return self.loaded

    def analyse(self, labels: Iterable[Label] | None = None, *, drop_declarations: bool = False) -> Analysis:
        """Turn the targets (and their dependencies) into steps and compute every version.

        ``drop_declarations``: once the steps are made, drop every loaded target's attributes and call site
        (``Target.drop_declaration``) before versions are computed, so their memory is reused; for a caller
        that reads neither afterwards (the build flow). Labels, dependencies, source files and packages stay;
        the loader keeps the same target objects, so a later ``load`` of the same ``Session`` gives them dropped
        too. Answers ``bench/run.py``'s layered 100,000 ``incremental`` row's peak memory (``marinbuild-cli``)."""
        from marinbuild.analysis.analyze import analyze
        from marinbuild.load import StatCache

        assert self.loaded is not None, "load first"
        roots = list(self.labels if labels is None else labels)
        cache = StatCache(self.workspace.stat_cache_path)
        self.analysis = analyze(self.loaded, roots, self.workspace, cache)
        cache.save()
        if drop_declarations:
            for target in self.loaded.targets.values():
                target.drop_declaration()
        self.engine = self.make_engine()
        self.engine.add_all([step for label in roots for step in self.analysis.steps_of[label]])
        return self.analysis

    def make_engine(self, listeners: list[Any] | None = None) -> Engine:
        from marinbuild.engine import Engine

        s = self.settings
        return Engine(
            s.prefix,
            os.path.join(s.prefix, "experiments") if "://" not in s.prefix else s.prefix + "/experiments",
            heartbeat_interval=s.heartbeat_interval,
            stale_after=s.stale_after,
            listeners=listeners if listeners is not None else [],
            keep_going=s.keep_going,
            backend=self.make_backend(),
        )

    def make_backend(self) -> Any:
        """The backend the settings name (``"local"``: the engine's threads, whatever ``$MARINBUILD_BACKEND`` says
        to scripts); Ray is not started here."""
        s = self.settings
        if s.backend == LOCAL:  # the engine constructs it, with the run's --jobs
            return s.backend
        options = BackendOptions(
            ray_address=s.ray_address,
            ray_max_retries=s.ray_max_retries,
            working_dir=self.workspace.root,
        )
        return make_backend(s.backend, options)

    def steps_of(self, label: Label) -> list[ExecutorStep]:
        assert self.analysis is not None and self.engine is not None
        return [self.engine.canonicalize(s) for s in self.analysis.steps_of[label]]

    def output_paths_of(self, label: Label) -> list[str]:
        assert self.engine is not None
        return [self.engine.output_paths[s] for s in self.steps_of(label)]

    def requested_steps(self) -> list[ExecutorStep]:
        assert self.analysis is not None
        return self.analysis.requested_steps(self.labels)
