"""The engine: versioned steps -> a plan -> a run -> the records around it. Both faces call it.

The CLI (``analysis.build``) and Marin scripts (``executor.Executor``, an ``Engine`` with Marin's names) resolve
``Settings`` alike and build through ``engine/build.py``. One ``Engine`` holds one version table (``core/versions.py``);
each ``run`` is one build with its own ``BuildContext``.

Contract:
- ``add``/``add_all`` version steps; ``steps``, ``configs``, ``dependencies``, ``versions``, ``version_strs``,
  ``hashed_versions``, ``output_paths``, ``is_pseudo_dep`` are the table's columns, with Marin's meanings;
  ``canonicalize`` names the step standing for equal versions; ``action_digest`` is the action cache's key;
  ``info_text`` a step's ``.executor_info``.
- ``run`` versions, plans (``planning.py``), runs unless dry or nothing to run (``execute.py``), records the code of
  each step that succeeded and, unless dry, checks the built steps' code (``code_records.py``); given listeners, it
  ends with a ``compute`` event (what the build reused and spent, ``run/compute.py``); it returns ``output_paths``.
  ``plan``, ``outcome``, ``succeeded``, ``code_changed``, ``dry_run_problems`` describe the last run.
- ``record_infos``/``write_infos``/``experiment_url``: the run's records in Marin's schema (``infos.py``,
  ``commit.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from marinbuild.core.gc_control import gc_paused
from marinbuild.core.placeholders import ExecutorStep, InputName
from marinbuild.core.versions import VersionTable
from marinbuild.engine import commit, planning
from marinbuild.engine.code_records import CodeChanges, record
from marinbuild.engine.errors import StepFailedError
from marinbuild.engine.execute import call_for, execute, local_problems
from marinbuild.engine.infos import ExecutorInfo, ExecutorStepInfo, run_info, step_info_text
from marinbuild.engine.serve_url import experiment_url, serve_url
from marinbuild.engine.settings import Settings
from marinbuild.load.sources import StatCache
from marinbuild.run import compute
from marinbuild.run import events as ev
from marinbuild.run.backends import LOCAL
from marinbuild.run.leases import BuildContext
from marinbuild.run.plan import BUILT, REBUILD
from marinbuild.run.scheduler import Outcome
from marinbuild.store import fs
from marinbuild.store.holders import new_worker_id
from marinbuild.store.lease import STALE_AFTER
from marinbuild.store.status import status_path

if TYPE_CHECKING:
    from marinbuild.run.backend import Backend
    from marinbuild.run.events import Event, Listener
    from marinbuild.run.plan import Plan


class Engine:
    """Versions, plans and runs ``ExecutorStep``s as ``settings`` say; see the module's contract.

    ``listeners`` receive the run's events (None: log them). ``backend``: a backend object the caller owns; None: each
    run constructs the one ``settings.backend`` names and shuts it down when it ends."""

    def __init__(
        self,
        settings: Settings,
        description: str | None = None,
        *,
        listeners: list[Listener] | None = None,
        backend: Backend | None = None,
    ):
        self.settings = settings
        self.prefix = settings.prefix
        self.executor_info_base_path = settings.executor_info_base_path
        self.description = description
        self._versions = table = VersionTable(settings.prefix)
        self.steps = table.steps
        self.configs = table.configs
        self.dependencies = table.dependencies
        self.versions = table.versions
        self.version_strs = table.version_strs
        self.hashed_versions = table.hashed_versions
        self.output_paths = table.output_paths
        self.is_pseudo_dep = table.is_pseudo_dep
        self.listeners = listeners
        self.backend = backend
        self.worker_id = new_worker_id()
        self.step_infos: list[ExecutorStepInfo] = []
        self.executor_info: ExecutorInfo | None = None
        self.executor_info_path: str | None = None
        self.plan: Plan | None = None  # The plan of the last ``run`` (``run/plan.py``): every needed step's state.
        self.outcome: Outcome[ExecutorStep] | None = None
        """What the last ``run`` ran (``run/scheduler.py``); None after a dry or refused run."""
        self.succeeded: list[ExecutorStep] = []
        """The steps the last ``run`` ran successfully, in the order they finished (also when it failed after)."""
        self.code_changed: dict[ExecutorStep, list[str]] = {}
        """The steps the last ``run`` found built whose code changed since (not part of their key, so not rebuilt),
        with the files that changed."""
        self.dry_run_problems: list[str] = []
        """After a dry run on the local backend: the steps to run that it could not run (``resource_problems``)."""
        self._code: CodeChanges | None = None

    # -- versions -------------------------------------------------------------------------
    @property
    def table(self) -> VersionTable:
        """The version table: every versioned step's version, path and dependencies (``core/versions.py``)."""
        return self._versions

    def add(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        """Version ``step`` and everything it depends on (nothing is read or written)."""
        self._versions.compute_version(step, is_pseudo_dep)

    def add_all(self, steps: Iterable[ExecutorStep], is_pseudo_dep: bool = False) -> None:
        """``add`` each step, the cyclic collector paused for the whole batch (it would rescan the growing tables)."""
        with gc_paused():
            for step in steps:
                self.add(step, is_pseudo_dep)

    @property
    def version_str_to_step(self) -> dict[str, ExecutorStep]:
        """Marin's index of the steps that stand for each version, made when read (the table keeps few strings)."""
        return {self.version_strs[step]: step for step in self.steps}

    def canonicalize(self, step: ExecutorStep) -> ExecutorStep:
        """Multiple ``ExecutorStep``s can have the same version; this is the one that stands for them."""
        return self._versions.canonicalize(step)

    def action_digest(self, step: ExecutorStep) -> str:
        """The sha256 of ``step``'s version string: the action cache's key."""
        return self._versions.action_digest(step)

    def info_text(self, step: ExecutorStep) -> str:
        """The ``.executor_info`` text of ``step`` (a canonical step), as Marin writes it (without the newline)."""
        return step_info_text(self._versions, step)

    # -- records --------------------------------------------------------------------------
    def record_infos(self) -> None:
        """Compute ``step_infos`` and ``executor_info`` for the steps versioned so far (Marin's ``get_infos``)."""
        self.step_infos, self.executor_info = run_info(
            self._versions, worker_id=self.worker_id, prefix=self.prefix, description=self.description
        )

    def _run_info(self) -> ExecutorInfo:
        """``executor_info``, computed (``record_infos``) if it was not yet."""
        if self.executor_info is None:
            self.record_infos()
        assert self.executor_info is not None
        return self.executor_info

    def write_infos(self) -> None:
        """Write every step's ``.executor_info`` and the run's info JSON (Marin's ``write_infos``)."""
        commit.write_step_infos(self._versions)
        self.executor_info_path = commit.write_run_info(self._versions, self._run_info(), self.executor_info_base_path)

    def experiment_url(self) -> str:
        """Where this run is shown: ``marinbuild serve``'s page if a base URL is set, else Marin's data browser."""
        if self.executor_info_path is None:
            self.executor_info_path = commit.run_info_path(self._run_info(), self.executor_info_base_path)

        base = serve_url()
        if base is not None:
            return experiment_url(base, self.executor_info_path)
        host = "https://marin.community/data-browser" if self.prefix.startswith("gs://") else "http://localhost:5000"
        import urllib.parse

        return host + "/experiment?path=" + urllib.parse.quote(self.executor_info_path)

    # -- running --------------------------------------------------------------------------
    def run(
        self,
        steps: Sequence[ExecutorStep | InputName],
        *,
        dry_run: bool = False,
        run_only: list[str] | None = None,
        force_run_failed: bool = True,
        max_concurrent: int | None = None,
        rebuild: list[ExecutorStep] | None = None,
    ) -> dict[ExecutorStep, str]:
        """Build ``steps`` (and what they need); return every known step's output path.

        ``run_only`` regexes select steps by name (plus what they need). Built steps are skipped, with dependencies only
        they needed. A failed step stops its dependents (DEP_FAILED) while others go on; then ``StepFailedError`` names
        every failure. ``dry_run`` writes nothing. ``rebuild`` steps run again even when built."""
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"max_concurrent must be a positive integer, got {max_concurrent}")

        self.plan, self.outcome, self.succeeded, self.code_changed, self.dry_run_problems = None, None, [], {}, []
        succeeded: list[str] = []
        failed: StepFailedError | None = None
        try:
            with BuildContext() as context:
                self._run(
                    steps,
                    context,
                    _Succeeded(succeeded),
                    dry_run=dry_run,
                    run_only=run_only,
                    force_run_failed=force_run_failed,
                    max_concurrent=max_concurrent,
                    rebuild=rebuild or [],
                )
        except StepFailedError as exc:
            failed = exc
        finally:
            self._record_code(succeeded)
        if not dry_run and self.plan is not None and self.listeners:  # reused and spent (``run/compute.py``): a
            # listing per step folder, for listeners given (the CLI's); none (Marin's default: log lines) skips it
            paths = self.output_paths
            reused = [*self.plan.by_state(BUILT), *(self.outcome.cached if self.outcome else ())]
            data = compute.account({s.name: paths[s] for s in reused}, {s.name: paths[s] for s in self.succeeded})
            self._bus.emit(ev.COMPUTE, detail=compute.text(data), data=data)
        if failed is not None:
            raise failed
        return self.output_paths

    def _run(
        self,
        steps: Sequence[ExecutorStep | InputName],
        context: BuildContext,
        succeeded: Listener,
        *,
        dry_run: bool,
        run_only: list[str] | None,
        force_run_failed: bool,
        max_concurrent: int | None,
        rebuild: list[ExecutorStep],
    ) -> None:
        stale_after = self.settings.stale_after
        with gc_paused():  # versions and plan: many objects, no cyclic garbage (the steps' own code runs with gc on)
            requested: list[ExecutorStep] = []
            for given in steps:
                step = given.step if isinstance(given, InputName) else given
                if step is not None:
                    self.add(step, is_pseudo_dep=False)
                    requested.append(step)
            listeners = self.listeners if self.listeners is not None else [ev.log_listener]
            bus = self._bus = ev.EventBus([*listeners, succeeded])
            graph, plan = planning.plan_run(
                self._versions,
                requested,
                run_only=run_only,
                rebuild=rebuild,
                worker_id=self.worker_id,
                stale_after=stale_after if stale_after is not None else STALE_AFTER,
            )
            self.plan = plan
        if dry_run:  # the names cache status and query give: stale when another version of the step is there
            planning.mark_stale(plan, self.prefix, self.output_paths)
        planned = (
            (step.name, self.output_paths[step], step_plan.state, step_plan.status)
            for step, step_plan in plan.steps.items()
        )
        ev.emit_plan(bus, planned, dry_run)
        if not dry_run:  # a dry run reads statuses only
            self.code_changed = self.code_changes().check(plan.by_state(BUILT))
        if not force_run_failed:
            planning.refuse_failed_before(plan, self.output_paths)
        if dry_run:
            self.dry_run_problems = self._local_problems(plan)
            return
        if rebuild:
            for step in plan.by_state(REBUILD):
                fs.remove(status_path(self.output_paths[step]))
        selected = run_only is not None
        if not plan.to_run:  # everything is built: nothing to start, check or record
            commit.write_infos_not_run(self._versions, graph, plan, selected)
            bus.emit(ev.BUILD_STARTED, data={"steps": 0})
            bus.emit(ev.BUILD_FINISHED, data={"ran": 0, "failed": 0})
            self.outcome = Outcome()
            return

        self.outcome = execute(
            self._versions,
            graph,
            plan,
            bus,
            self.settings,
            self.worker_id,
            self.backend,
            max_concurrent=max_concurrent,
            selected=selected,
            context=context,
            write_run_info=self._write_run_info,
        )

    def code_changes(self) -> CodeChanges:
        """The engine's one ``CodeChanges`` (``code_records.py``), so each output's code record is read once."""
        if self._code is None:
            cache_dir = self.settings.cache_dir
            stat_cache = StatCache(cache_dir / "stat_cache.json" if cache_dir is not None else None)
            self._code = CodeChanges(self.settings.root or Path.cwd(), self.output_paths, stat_cache)
        return self._code

    def _record_code(self, succeeded_paths: list[str]) -> None:
        """Record the code each step that succeeded ran, beside its output (``code_records.py``)."""
        by_path = {path: step for step, path in self.output_paths.items()} if succeeded_paths else {}
        self.succeeded = [by_path[path] for path in succeeded_paths if path in by_path]
        if not self.succeeded:
            return

        code = self.code_changes()
        for step in self.succeeded:
            record(self.output_paths[step], code.code_of(step))

    def _write_run_info(self) -> None:
        """The run info, written before any step starts (as Marin's ``run``), before steps instantiate configs."""
        self.record_infos()
        self.executor_info_path = commit.write_run_info(self._versions, self._run_info(), self.executor_info_base_path)

    def _local_problems(self, plan: Plan) -> list[str]:
        """For a dry run on the local backend: the steps to run it could not run (a TPU step, ...)."""
        if self.backend is not None or self.settings.backend != LOCAL:
            return []
        return local_problems((step, call_for(step, self.configs[step], self.prefix)) for step in plan.to_run)


class _Succeeded:
    """The listener collecting the output paths of the steps that succeeded, in the order they did."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __call__(self, event: Event) -> None:
        if event.kind == "succeeded" and event.output_path is not None:
            self.paths.append(event.output_path)
