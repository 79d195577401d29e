"""Marin's executor API (``marin.execution.executor``), backed by marinbuild's engine.

Change ``from marin.execution.executor import ...`` to ``from marinbuild.executor import ...``
and a Marin experiment script runs unchanged: the same versions and output paths, the
same ``.executor_info``/``.executor_status``/lease/``.artifact.json`` files, so an
existing Marin prefix is recognised as built. What is better than Marin's: completion is
event-driven, nothing recurses with graph depth, dry runs read statuses and say what
would run, a runner that loses its lease never writes SUCCESS, and a step whose outputs
are built does not rebuild its dependencies.

This module stays light to import: storage and execution load when ``run`` is called, and only the
modules the run needs (a no-op loads no backend, no resource or runtime-env code). Kept under the
complexity rule on ``bench/run.py``'s no-op and script-alone rows (docs/performance.md).
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from marinbuild.core.gc_control import gc_paused, skip_final_collection
from marinbuild.core.jsonenc import dumps_indented
from marinbuild.core.placeholders import (
    THIS_OUTPUT_PATH,
    ExecutorFunction,
    ExecutorStep,
    InputName,
    MirroredValue,
    OutputName,
    VersionedValue,
    ensure_versioned,
    get_executor_step,
    mirrored,
    output_path_of,
    this_output_path,
    versioned,
)
from marinbuild.core.versions import VersionTable
from marinbuild.core.walk import (
    InputNameEvent,
    VersionedEvent,
    collect_dependencies_and_version,
    dependency_index_str,
    instantiate_config,
    resolve_local_placeholders,
    unwrap_versioned_value,
    upstream_steps,
    walk_config,
)
from marinbuild.remote import remote
from marinbuild.store.status import STATUS_DEP_FAILED, STATUS_FAILED, STATUS_RUNNING, STATUS_SUCCESS

if TYPE_CHECKING:  # the engine's modules load only when a run needs them
    from marinbuild.core.graph import StepGraph
    from marinbuild.run.backend import Backend
    from marinbuild.run.build_context import BuildContext
    from marinbuild.run.events import EventBus, Listener
    from marinbuild.run.outcome import Outcome
    from marinbuild.run.plan import Plan
    from marinbuild.run.step_call import StepCall
    from marinbuild.run.step_job import StepJob

__all__ = [
    "STATUS_DEP_FAILED",
    "STATUS_FAILED",
    "STATUS_RUNNING",
    "STATUS_SUCCESS",
    "THIS_OUTPUT_PATH",
    "Executor",
    "ExecutorFunction",
    "ExecutorInfo",
    "ExecutorMainConfig",
    "ExecutorStep",
    "ExecutorStepInfo",
    "InputName",
    "InputNameEvent",
    "MirroredValue",
    "OutputName",
    "PreviousStepFailedError",
    "PreviousTaskFailedError",
    "StepFailedError",
    "VersionedEvent",
    "VersionedValue",
    "asdict_without_description",
    "collect_dependencies_and_version",
    "compute_output_path",
    "default_prefix",
    "dependency_index_str",
    "ensure_versioned",
    "executor_main",
    "get_caller_path",
    "get_executor_step",
    "get_fn_name",
    "get_git_commit",
    "get_user",
    "instantiate_config",
    "materialize",
    "mirrored",
    "output_path_of",
    "remote",
    "resolve_executor_step",
    "resolve_local_placeholders",
    "this_output_path",
    "unwrap_versioned_value",
    "upstream_steps",
    "versioned",
    "walk_config",
]

logger = logging.getLogger("marinbuild")
ConfigT = TypeVar("ConfigT")

DEFAULT_LOCAL_PREFIX = "/tmp/marin"


def default_prefix() -> str:
    """``MARIN_PREFIX`` if set, else Marin's local default folder. Never a network call."""
    return os.environ.get("MARIN_PREFIX") or DEFAULT_LOCAL_PREFIX


class StepFailedError(RuntimeError):
    """One or more steps failed; ``failures`` maps each failed step's name to its exception. The message names
    each failed step's ``.marinbuild_traceback.txt`` (its whole traceback, kept beside its status)."""

    def __init__(self, failures: dict[str, BaseException], dep_failed: list[str]):
        from marinbuild.run.failure import traceback_file_of

        def named(name: str, error: BaseException) -> str:
            path = traceback_file_of(error)
            return f"{name} (traceback: {path})" if path else name

        names = ", ".join(named(name, error) for name, error in failures.items())
        message = f"{len(failures)} step(s) failed: {names}"
        if dep_failed:
            message += f"; {len(dep_failed)} step(s) not run because a dependency failed (DEP_FAILED): "
            message += ", ".join(dep_failed)
        super().__init__(message)
        self.failures = failures
        self.dep_failed = dep_failed


class PreviousTaskFailedError(Exception):
    """A needed step failed in an earlier run and ``force_run_failed`` is False. Marin's name and base class (a plain
    ``Exception``, ``marin.execution.executor_step_status.PreviousTaskFailedError``), so code that catches Marin's
    keeps working when it imports this one instead."""


PreviousStepFailedError = PreviousTaskFailedError
"""marinbuild's earlier name of ``PreviousTaskFailedError``."""


@dataclass(frozen=True)
class ExecutorStepInfo:
    """What is recorded about a step in ``.executor_info`` (Marin's schema)."""

    name: str
    fn_name: str
    config: Any
    description: str | None
    override_output_path: str | None
    version: dict[str, Any]
    dependencies: list[str]
    output_path: str


@dataclass(frozen=True)
class ExecutorInfo:
    """What is recorded about a run in ``<executor_info_base_path>/<script>-<hash>.json``."""

    worker_id: str
    git_commit: str | None
    caller_path: str
    created_date: str
    user: str | None
    prefix: str
    description: str | None
    steps: list[ExecutorStepInfo]


_FN_NAMES: dict[Any, str] = {}
"""Memo of ``_fn_name``: a function's name is a fact about the function object, the same in every build."""
_FUNCTION = type(lambda: None)


def get_fn_name(fn: ExecutorFunction, short: bool = False) -> str:
    """A name for ``fn`` that is the same in every run: ``module.qualname`` (Marin printed a memory address)."""
    if short or type(fn) is not _FUNCTION:  # partials, wrappers and lambdas made per step are not kept here
        return _fn_name(fn, short)
    name = _FN_NAMES.get(fn)
    if name is None:
        name = _FN_NAMES[fn] = _fn_name(fn)
    return name


def _fn_name(fn: ExecutorFunction, short: bool = False) -> str:
    if fn is None:
        return "None"
    inner = getattr(fn, "fn", None)  # Marin's RemoteCallable and similar wrappers
    if inner is not None and callable(inner) and not hasattr(fn, "__qualname__"):
        fn = inner
    target = fn.func if hasattr(fn, "func") and hasattr(fn, "args") else fn  # functools.partial
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    if short:
        return qualname.rsplit(".", 1)[-1]
    module = getattr(target, "__module__", None) or type(target).__module__
    return f"{module}.{qualname}"


def _now_iso() -> str:
    """Local time now, as Marin records it: ``datetime.now().isoformat()``."""
    return datetime.datetime.now().isoformat()


def _worker_id() -> str:
    from marinbuild.store.holders import new_worker_id

    return new_worker_id()


def _git_commit() -> str | None:
    """HEAD's commit of the current directory's repository (what Marin's ``git rev-parse HEAD`` gives when ``.git``
    is there), read from the files (no subprocess). ``.git`` may be a file pointing elsewhere (a worktree)."""
    git = os.path.join(os.getcwd(), ".git")
    try:
        if os.path.isfile(git):
            with open(git) as f:
                pointer = f.read().strip()
            if not pointer.startswith("gitdir: "):
                return None
            git = os.path.join(os.getcwd(), pointer[len("gitdir: ") :])
        common = git
        if os.path.exists(os.path.join(git, "commondir")):  # a worktree's refs live in the main repository
            with open(os.path.join(git, "commondir")) as f:
                common = os.path.join(git, f.read().strip())
        with open(os.path.join(git, "HEAD")) as f:
            head = f.read().strip()
        if not head.startswith("ref: "):
            return head
        ref = head[5:]
        for folder in (git, common):
            ref_file = os.path.join(folder, ref)
            if os.path.exists(ref_file):
                with open(ref_file) as f:
                    return f.read().strip()
        with open(os.path.join(common, "packed-refs")) as f:
            for line in f:
                if line.strip().endswith(" " + ref):
                    return line.split()[0]
    except OSError:
        return None
    return None


def _caller_path() -> str:
    """The outermost real file on the stack: the experiment script (as Marin records it)."""
    frame: Any = sys._getframe()
    outermost = sys.argv[0] if sys.argv and sys.argv[0] else "<unknown>"
    while frame is not None:
        if not frame.f_code.co_filename.startswith("<"):
            outermost = frame.f_code.co_filename
        frame = frame.f_back
    return outermost


def _user() -> str | None:
    try:
        import getpass

        return getpass.getuser()
    except Exception:
        return None


get_git_commit = _git_commit
get_caller_path = _caller_path
get_user = _user


def asdict_without_description(obj: Any) -> dict[str, Any]:
    """Marin's helper: a dataclass (an info) as a dict, recursively, without its top-level ``description``."""
    import copy
    from dataclasses import fields, is_dataclass

    def recurse(value: Any) -> Any:
        if is_dataclass(value) and not isinstance(value, type):
            return {f.name: recurse(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(recurse(v) for v in value))
        if isinstance(value, list | tuple):
            return type(value)(recurse(v) for v in value)
        if isinstance(value, dict):
            return {recurse(k): recurse(v) for k, v in value.items()}
        return copy.deepcopy(value)

    data = recurse(obj)
    assert isinstance(data, dict)
    data.pop("description", None)
    return data


class Executor:
    """Computes versions and output paths of ``ExecutorStep``s and runs the ones not yet built.

    The attributes ``steps``, ``configs``, ``dependencies``, ``versions``, ``version_strs``,
    ``hashed_versions``, ``output_paths``, ``is_pseudo_dep`` and ``step_infos`` have Marin's
    meanings. Extra keyword arguments tune what Marin hard-codes: lease timing, the event
    listeners, the backend.
    """

    def __init__(
        self,
        prefix: str,
        executor_info_base_path: str,
        description: str | None = None,
        *,
        heartbeat_interval: float | None = None,
        stale_after: float | None = None,
        listeners: list[Listener] | None = None,
        backend: Backend | str | None = None,
        keep_going: bool = True,
        metadata_cache_path: str | None | Literal["default"] = "default",
    ):
        self.prefix = prefix
        self.executor_info_base_path = executor_info_base_path
        self.description = description
        self._table = VersionTable(prefix)
        t = self._table
        self.steps = t.steps
        self.configs = t.configs
        self.dependencies = t.dependencies
        self.versions = t.versions
        self.version_strs = t.version_strs
        self.version_bytes = t.version_bytes
        """``version_strs`` as the ASCII bytes that are hashed (not one of Marin's attributes; no decoding)."""
        self.action_digest = t.action_digest
        """``step -> sha256 of its version string``, the action cache's key (not one of Marin's attributes)."""
        self.version_str_to_step = t.version_str_to_step
        self.hashed_versions = t.hashed_versions
        self.output_paths = t.output_paths
        self.is_pseudo_dep = t.is_pseudo_dep
        self.step_infos: list[ExecutorStepInfo] = []
        self.executor_info: ExecutorInfo | None = None
        self.executor_info_path: str | None = None
        self.heartbeat_interval = heartbeat_interval
        self.stale_after = stale_after
        self.listeners = listeners
        self.backend = backend
        self.keep_going = keep_going
        self.metadata_cache_path = metadata_cache_path
        """Where each run keeps its cache of verified remote steps (``marinbuild.store.metadata_cache``);
        ``"default"``: ``$MARINBUILD_METADATA_CACHE`` or the user's cache folder; None: no cache."""
        self.worker_id = _worker_id()
        self.plan: Plan | None = None
        """The plan of the last ``run`` (``marinbuild.run.plan.Plan``): every needed step's state."""
        self.outcome: Outcome[ExecutorStep] | None = None
        self.dry_run_problems: list[str] = []
        """After a dry run on the local backend: the steps to run that it could not run (``resource_problems``)."""
        """What the last ``run`` did (``marinbuild.run.outcome.Outcome``)."""
        self._warned = 0

    # -- versions -------------------------------------------------------------------------
    def compute_version(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        self._table.compute_version(step, is_pseudo_dep)
        self._warn_new()

    def compute_versions(self, steps: list[ExecutorStep], is_pseudo_dep: bool = False) -> None:
        """``compute_version`` of each step, as ``run`` does it: with the cyclic garbage collector paused for the
        whole batch (between separate ``compute_version`` calls it would rescan the growing tables)."""
        with gc_paused():
            for step in steps:
                self.compute_version(step, is_pseudo_dep)

    def canonicalize(self, step: ExecutorStep) -> ExecutorStep:
        """Multiple ``ExecutorStep``s can have the same version; this is the one that stands for them."""
        return self._table.canonicalize(step)

    def _warn_new(self) -> None:
        """Marin's warning for a step placed by ``override_output_path``; not for a BUILD target, whose
        ``override_output_path`` attribute says the same thing in the declaration itself."""
        mismatches = self._table.override_mismatches[self._warned :]
        if mismatches:
            from marinbuild.analysis.analyze import TargetConfig  # only when a step was placed by hand
        for step, computed, _override in mismatches:
            if isinstance(step.config, TargetConfig):
                continue
            logger.warning(
                "Output path %s doesn't match given override %s, using the latter.", computed, step.override_output_path
            )
        self._warned = len(self._table.override_mismatches)

    # -- infos ----------------------------------------------------------------------------
    def _step_info(self, step: ExecutorStep) -> ExecutorStepInfo:
        return ExecutorStepInfo(
            name=step.name,
            fn_name=get_fn_name(step.fn),
            config=self.configs[step],
            description=step.description,
            override_output_path=step.override_output_path,
            version=self.versions[step],
            dependencies=[self.output_paths[dep] for dep in self.dependencies[step]],
            output_path=self.output_paths[step],
        )

    def get_infos(self) -> None:
        """Compute ``step_infos`` and ``executor_info`` for the steps computed so far."""
        self.step_infos = [self._step_info(step) for step in self.steps]
        self.executor_info = ExecutorInfo(
            worker_id=self.worker_id,
            git_commit=_git_commit(),
            caller_path=_caller_path(),
            created_date=_now_iso(),
            user=_user(),
            prefix=self.prefix,
            description=self.description,
            steps=self.step_infos,
        )

    def _step_info_text(self, step: ExecutorStep) -> str:
        """The ``.executor_info`` content Marin writes: ``json.dumps(info, indent=2)`` of the step info's fields in
        their order (description left out), composed field by field around the memoized text of the nested
        version (``indented_version``). Not kept: it is written once per step, and a step deep in a wide graph
        nests its ancestors' versions."""
        info = self._step_info(step)
        return "".join(
            (
                '{\n  "name": ',
                dumps_indented(info.name, 1),
                ',\n  "fn_name": ',
                dumps_indented(info.fn_name, 1),
                ',\n  "config": ',
                dumps_indented(info.config, 1),
                ',\n  "override_output_path": ',
                dumps_indented(info.override_output_path, 1),
                ',\n  "version": ',
                self._table.indented_version(step).replace("\n", "\n  "),
                ',\n  "dependencies": ',
                dumps_indented(info.dependencies, 1),
                ',\n  "output_path": ',
                dumps_indented(info.output_path, 1),
                "\n}",
            )
        )

    def _run_info_steps(self) -> Iterator[Any]:
        """Each step's entry of the run info (``marinbuild.store.run_info.step_pieces``), made as it is consumed."""
        from marinbuild.store import run_info

        pieces = self._table.version_pieces
        for info, step in zip(self.step_infos, self.steps, strict=True):
            yield run_info.step_pieces(info, pieces[step])

    def _run_info_path(self) -> str:
        """Where the run info of the steps computed so far goes (hashes every step's entry; writes nothing)."""
        from marinbuild.store import fs, run_info

        assert self.executor_info is not None, "call get_infos() first"
        script = run_info.script_name(self.executor_info.caller_path)
        return fs.join(self.executor_info_base_path, run_info.name(script, self._run_info_steps()))

    def _write_run_info(self, only_if_new: bool) -> str:
        """Write the run info JSON (``marinbuild.store.run_info``: Marin's content, one step per line, streamed in
        one pass, replaced atomically); set and return ``executor_info_path``."""
        from marinbuild.store import run_info

        assert self.executor_info is not None, "call get_infos() first"
        info = self.executor_info
        head = {key: getattr(info, key) for key in run_info.HEAD_KEYS}
        self.executor_info_path = run_info.write(
            self.executor_info_base_path,
            run_info.script_name(info.caller_path),
            head,
            self._run_info_steps(),
            only_if_new,
        )
        return self.executor_info_path

    def _start_run_info(self) -> Any:
        """The run info of a run that runs steps, written on a thread while they run (``run_info.BackgroundWrite``):
        its size follows the whole graph, and no step needs it. The infos are made here, before any step starts
        (the steps' own ``.executor_info`` texts instantiate configs too, on the backend's threads)."""
        from marinbuild.store.run_info import BackgroundWrite

        self.get_infos()
        return BackgroundWrite(lambda: self._write_run_info(only_if_new=True))

    def write_infos(self) -> None:
        """Write every step's ``.executor_info`` and the run's info JSON (as Marin's ``write_infos``)."""
        from marinbuild.store import records

        if self.executor_info is None:
            self.get_infos()
        for step in self.steps:
            records.write_info(self.output_paths[step], self._step_info_text(step))
        self._write_run_info(only_if_new=False)

    def get_experiment_url(self) -> str:
        """Where this run is shown: ``marinbuild serve``'s run page when a base URL is configured
        (``$MARINBUILD_SERVE_URL``, which the CLI sets from ``[tool.marinbuild] serve_url`` or a running
        ``marinbuild serve``; ``marinbuild.serve.url``), else Marin's data browser."""
        if self.executor_info_path is None:
            self.executor_info_path = self._run_info_path()
        from marinbuild.serve.url import experiment_url, serve_url

        base = serve_url()
        if base is not None:
            return experiment_url(base, self.executor_info_path)
        if self.prefix.startswith("gs://"):
            host = "https://marin.community/data-browser"
        else:
            host = "http://localhost:5000"
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

        ``run_only`` regexes select steps by name (plus what they need). Steps already
        built are skipped, and so are dependencies only they needed. A failed step stops
        its dependents (DEP_FAILED) while independent steps go on; then ``StepFailedError``
        names every failure. ``dry_run`` reads statuses and writes nothing. ``rebuild`` steps run
        again even when built (their status is removed just before the run).

        Each run is one build with its own ``BuildContext`` (lease keeper, runner registry, metadata
        cache), closed when it returns.
        """
        if max_concurrent is not None and max_concurrent < 1:
            raise ValueError(f"max_concurrent must be a positive integer, got {max_concurrent}")
        from marinbuild.run.build_context import BuildContext
        from marinbuild.store.metadata_cache import default_path

        path = default_path() if self.metadata_cache_path == "default" else self.metadata_cache_path
        with BuildContext(path) as context:
            return self._run(
                steps,
                context,
                dry_run=dry_run,
                run_only=run_only,
                force_run_failed=force_run_failed,
                max_concurrent=max_concurrent,
                rebuild=rebuild,
            )

    def _run(
        self,
        steps: Sequence[ExecutorStep | InputName],
        context: BuildContext,
        *,
        dry_run: bool,
        run_only: list[str] | None,
        force_run_failed: bool,
        max_concurrent: int | None,
        rebuild: list[ExecutorStep] | None,
    ) -> dict[ExecutorStep, str]:
        from marinbuild.core.graph import StepGraph
        from marinbuild.run import events as ev
        from marinbuild.run import plan as planning
        from marinbuild.store.lease import STALE_AFTER

        with gc_paused():  # versions and plan: many objects, no cyclic garbage (the steps' own code runs with gc on)
            requested: list[ExecutorStep] = []
            for given in steps:
                step = given.step if isinstance(given, InputName) else given
                if step is not None:
                    self.compute_version(step, is_pseudo_dep=False)
                    requested.append(step)
            graph = StepGraph(self._table)
            if run_only is not None:
                targets, unused = graph.select(run_only)
                if unused:
                    logger.warning("run_only patterns matched no step: %s", ", ".join(unused))
            else:
                targets = [self.canonicalize(s) for s in requested]
            targets = list(dict.fromkeys([*targets, *(self.canonicalize(s) for s in rebuild or ())]))

            bus = ev.EventBus(self.listeners if self.listeners is not None else [ev.log_listener])
            stale_after = self.stale_after if self.stale_after is not None else STALE_AFTER
            self.plan = plan = planning.make_plan(
                graph,
                targets,
                worker_id=self.worker_id,
                stale_after=stale_after,
                rebuild=rebuild or (),
                status_reader=lambda paths: planning.read_statuses(paths, cache=context.metadata_cache),
            )
        if dry_run:  # the names cache status and query give: stale when another version of the step is there
            from marinbuild.cache.probe import with_other_versions

            missing = plan.by_state(planning.MISSING)
            stale = (
                with_other_versions(self.prefix, {s.name: self.output_paths[s] for s in missing}) if missing else set()
            )
            for step in missing:
                if step.name in stale:
                    plan.steps[step].state = planning.STALE
        for step, step_plan in plan.steps.items():
            bus.emit(
                ev.PLANNED,
                step=step.name,
                output_path=self.output_paths[step],
                detail=step_plan.state,
                data={"dry_run": dry_run, "status": step_plan.status},
            )
        failed_before = plan.by_state(planning.FAILED)
        if failed_before and not force_run_failed:
            from marinbuild.store.traceback_file import existing_traceback

            def named(s: ExecutorStep) -> str:
                traceback = existing_traceback(self.output_paths[s])
                return f"{s.name} ({plan.steps[s].status}" + (f"; traceback: {traceback})" if traceback else ")")

            names = ", ".join(named(s) for s in failed_before)
            raise PreviousTaskFailedError(f"step(s) failed previously: {names}; rerun with force_run_failed=True")
        if dry_run:
            self.dry_run_problems = self._local_problems(plan)
            return self.output_paths
        if rebuild:
            from marinbuild.store import fs
            from marinbuild.store.status import status_path

            for step in plan.by_state(planning.REBUILD):
                fs.remove(status_path(self.output_paths[step]))
        self.outcome = self._execute(graph, plan, bus, max_concurrent, force_run_failed, run_only is not None, context)
        return self.output_paths

    def _local_problems(self, plan: Plan) -> list[str]:
        """For a dry run on the local backend: the steps to run it could not run (a TPU step, ...)."""
        from marinbuild.run.backends import LOCAL

        if self.backend not in (None, LOCAL) or (self.backend is None and default_backend() != LOCAL):
            return []
        from marinbuild.run.local import LocalBackend

        backend = LocalBackend(1)
        try:
            return resource_problems(backend, {step: self._call_for(step) for step in plan.to_run})
        finally:
            backend.shutdown()

    def _execute(
        self,
        graph: StepGraph,
        plan: Plan,
        bus: EventBus,
        max_concurrent: int | None,
        force_run_failed: bool,
        selected: bool,
        context: BuildContext,
    ) -> Outcome[ExecutorStep]:
        from marinbuild.run import events as ev

        if not plan.to_run:  # everything is built: nothing to start, check or record
            from marinbuild.run.outcome import Outcome

            self._write_infos_of_steps_not_run(graph, plan, selected)
            bus.emit(ev.BUILD_STARTED, data={"steps": 0})
            bus.emit(ev.BUILD_FINISHED, data={"ran": 0, "failed": 0})
            return Outcome()
        from marinbuild.run.scheduler import schedule
        from marinbuild.run.step_job import LeaseSettings, StepJob
        from marinbuild.store.action_cache import ActionKey

        settings = LeaseSettings()
        if self.heartbeat_interval is not None:
            settings.heartbeat_interval = self.heartbeat_interval
        if self.stale_after is not None:
            settings.stale_after = self.stale_after
        cancel = threading.Event()
        jobs = {
            step: StepJob(
                name=step.name,
                output_path=self.output_paths[step],
                call=self._call_for(step),
                info_text=functools.partial(self._step_info_text, step),
                worker_id=self.worker_id,
                bus=bus,
                settings=settings,
                cancel=cancel,
                action=ActionKey(self._table.action_digest(step), step.name, step.override_output_path is not None),
                context=context,
            )
            for step in plan.to_run
        }
        backend: Backend
        if self.backend is None or isinstance(self.backend, str):  # a backend of this run's own
            backend, owned = _backend_named(self.backend or default_backend(), max_concurrent), True
        else:
            backend, owned = self.backend, False
        try:
            _check_resources(backend, jobs)  # before anything is written
            self._write_infos_of_steps_not_run(graph, plan, selected)
            writing = self._start_run_info()  # a run that runs nothing records nothing (plan.to_run is not empty)
            try:
                bus.emit(ev.BUILD_STARTED, data={"steps": len(jobs)})
                outcome = schedule(
                    plan.to_run,
                    self.dependencies,
                    jobs,
                    backend,
                    bus,
                    max_concurrent=max_concurrent,
                    keep_going=self.keep_going,
                    cancel=cancel,
                )
            except BaseException:
                writing.join()  # the build's own error (or an interrupt) is the one to raise
                raise
            writing.result()
        finally:
            if owned:
                backend.shutdown()
        bus.emit(ev.BUILD_FINISHED, data={"ran": len(outcome.ran), "failed": len(outcome.failed)})
        if outcome.failed:
            failures = {step.name: exc for step, exc in outcome.failed.items()}
            error = StepFailedError(failures, [s.name for s in outcome.dep_failed])
            first = next(iter(outcome.failed.values()))
            raise error from (first.__cause__ or first)
        return outcome

    def _write_infos_of_steps_not_run(self, graph: StepGraph, plan: Plan, selected: bool) -> None:
        """Marin writes every step's ``.executor_info`` before it starts any (``write_infos``), also for the steps it
        will not run: pseudo-dependencies nothing blocking needs, and steps ``run_only`` leaves out. Those get theirs
        here, before any step starts, when their folder has none (Marin's own step runner also writes only a missing
        one); the steps this run runs write theirs when they start. Steps below a built step are not looked at:
        whoever built them wrote theirs, so a no-op run without pseudo-dependencies checks and writes nothing.
        ``selected``: the run was narrowed by ``run_only``."""
        from marinbuild.run.plan import BUILT
        from marinbuild.store import records

        table = self._table
        if len(plan.steps) == len(table.steps):
            return
        if not selected:  # without run_only, a step the plan did not reach is below a built one or a pseudo-dependency
            left_out = [s for s in table.steps if table.is_pseudo_dep[s] and s not in plan.steps]
        else:
            built = [s for s, p in plan.steps.items() if p.state == BUILT]
            below_built = set(graph.blocking_closure(d for s in built for d in graph.blocking_deps(s)))
            left_out = [s for s in table.steps if s not in plan.steps and s not in below_built]
        if left_out:
            records.write_missing_infos(
                {self.output_paths[s]: functools.partial(self._step_info_text, s) for s in left_out}
            )

    def _call_for(self, step: ExecutorStep) -> StepCall:
        from marinbuild.core.walk import max_mirror_budget
        from marinbuild.run.step_call import StepCall
        from marinbuild.step_spec import step_function_of

        fn = step_function_of(step)  # a StepSpec's step (StepSpec.as_executor_step) is called with its output path
        config = self.configs[step]
        if fn is None:
            raise ValueError(f"step {step.name} has no fn to run")

        # the step's mirror:// copies are charged to its largest mirrored(..., budget_gb=) (Marin's rule)
        return StepCall(
            fn,
            config,
            step.resources,
            step.pip_dependency_groups,
            mirror_budget_gb=max_mirror_budget(step.config),
            mirror_prefix=self.prefix,
        )


BACKEND_ENV = "MARINBUILD_BACKEND"
"""The backend of an ``Executor`` given none (a Marin script's ``executor_main``): ``local`` or ``ray``."""


def default_backend() -> str:
    """``$MARINBUILD_BACKEND`` if set; else ``"ray"`` in a job submitted to a Ray cluster (a Marin script sent to the
    cluster runs its steps there, as Marin's executor does), else ``"local"``."""
    from marinbuild.run.backends import LOCAL, RAY
    from marinbuild.run.runtime_env import in_ray_job

    return os.environ.get(BACKEND_ENV) or (RAY if in_ray_job() else LOCAL)


def _backend_named(name: str, max_concurrent: int | None) -> Backend:
    """A new backend of the run: ``"local"`` (threads of this process) or ``"ray"`` (a Ray cluster: ``RAY_ADDRESS``,
    else a private local instance; the workspace around the current folder is shipped to a cluster, as the CLI
    ships it)."""
    from marinbuild.run.backends import BACKEND_NAMES, BackendOptions, make_backend

    if name not in BACKEND_NAMES:
        raise ValueError(
            f"unknown backend {name!r} (from {BACKEND_ENV} or Executor(backend=...)): "
            f"use {', '.join(map(repr, BACKEND_NAMES))} or a backend object"
        )
    return make_backend(name, BackendOptions(max_concurrent=max_concurrent))


def resource_problems(backend: Backend, calls: Mapping[ExecutorStep, Callable[[], Any]]) -> list[str]:
    """``"<step> <why>"`` for each step (with its call) the backend cannot give what it asks for."""
    from marinbuild.run.step_call import StepCall

    check = getattr(backend, "check_resources", None)
    if check is None:
        return []
    problems = []
    for step, call in calls.items():
        try:
            request = call.request()[0] if isinstance(call, StepCall) else step.resources
        except (TypeError, ValueError) as exc:
            problems.append(f"{step.name}: {exc}")
            continue
        reason = check(request) if request is not None else None
        if reason:
            problems.append(f"{step.name} {reason}")
    return problems


def _check_resources(backend: Backend, jobs: dict[ExecutorStep, StepJob]) -> None:
    """Refuse the run before anything starts if the backend cannot give some step what it asks for."""
    from marinbuild.run.resources import UnsatisfiableResourcesError

    problems = resource_problems(backend, {step: job.call for step, job in jobs.items()})
    if problems:
        name = getattr(backend, "name", type(backend).__name__)
        raise UnsatisfiableResourcesError(
            f"the {name} backend cannot run {len(problems)} step(s), so nothing ran: " + "; ".join(problems)
        )


def resolve_executor_step(
    step: ExecutorStep,
    config: Any,
    output_path: str,
    deps: list[Any] | None = None,
    dag_tpu_regions: list[str] | None = None,
    forced_region: str | None = None,
    mirror_budget_gb: float | None = None,
) -> Any:
    """``step`` (its config instantiated) as Marin's ``StepSpec``, a function of its output path: see
    ``marinbuild.step_spec.resolve_executor_step`` (loaded on first use)."""
    from marinbuild.step_spec import resolve_executor_step as resolve

    return resolve(step, config, output_path, deps, dag_tpu_regions, forced_region, mirror_budget_gb)


# -- entry points -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutorMainConfig:
    prefix: str | None = None
    """Attached to every output path (a local folder or e.g. gs://bucket/path); default $MARIN_PREFIX."""
    executor_info_base_path: str | None = None
    """Where the run's info JSON goes; default <prefix>/experiments."""
    dry_run: bool = False
    force_run_failed: bool = True
    run_only: list[str] | None = None
    """Run only the steps whose names match these regexes (re.search), and what they need."""
    max_concurrent: int | None = None
    """At most this many steps at once; default: every ready step."""


def _executor_main(
    config: ExecutorMainConfig,
    steps: list[ExecutorStep],
    description: str | None = None,
    max_concurrent: int | None = None,
) -> Executor:
    """``executor_main`` with its config given: Marin's undecorated ``executor_main`` (``executor_main.__wrapped__``),
    same parameters; ``max_concurrent`` wins over ``config.max_concurrent``. Returns the executor (Marin's: None)."""
    skip_final_collection()
    _configure_logging()
    prefix = config.prefix or default_prefix()
    base = config.executor_info_base_path or os.path.join(prefix, "experiments")
    executor = Executor(prefix=prefix, executor_info_base_path=base, description=description)
    executor.run(
        steps=steps,
        dry_run=config.dry_run,
        run_only=config.run_only,
        force_run_failed=config.force_run_failed,
        max_concurrent=max_concurrent if max_concurrent is not None else config.max_concurrent,
    )
    if not config.dry_run and executor.executor_info_path is not None:  # a no-op run writes no run info
        logger.info("Executor info written to %s", executor.executor_info_path)
    return executor


def executor_main(
    config: ExecutorMainConfig | None = None,
    steps: list[ExecutorStep] | None = None,
    description: str | None = None,
    max_concurrent: int | None = None,
    args: list[str] | None = None,
) -> Executor:
    """Run ``steps`` as a Marin experiment script does: flags from the command line (draccus), or ``config``."""
    if steps is None:
        raise TypeError("executor_main needs steps=[...]")
    if config is None:
        argv = sys.argv[1:] if args is None else args
        config = parse_main_args_simply(argv)
        if config is None:
            import draccus

            config = draccus.parse(ExecutorMainConfig, args=argv)
    return _executor_main(config, steps, description, max_concurrent)


executor_main.__wrapped__ = _executor_main  # type: ignore[attr-defined]
"""As on Marin's ``@draccus.wrap()``-decorated ``executor_main`` (``functools.wraps``): the function that takes the
config itself, ``executor_main.__wrapped__(config, steps, description=None, max_concurrent=None)``."""


def _configure_logging() -> None:
    """INFO logs on stderr, as Marin's ``executor_main`` sets up; nothing when the program has its own handlers."""
    if not logging.getLogger().handlers:
        from marinbuild.run.events import LogFormatter

        handler = logging.StreamHandler()
        handler.setFormatter(LogFormatter("%(asctime)s %(levelname)s %(message)s"))
        logging.basicConfig(level=logging.INFO, handlers=[handler])


_PLAIN_STRING = re.compile(r"[A-Za-z/._][A-Za-z0-9_./:@+=,-]*")
"""A value YAML reads as this very string: no quotes, spaces, flow or comment characters, not starting with a digit
(numbers, dates) or a sign."""
_YAML_WORDS = frozenset({"null", "~", "true", "false", "yes", "no", "on", "off", "y", "n", ".inf", ".nan"})


def parse_main_args_simply(argv: list[str]) -> ExecutorMainConfig | None:
    """``ExecutorMainConfig`` from the flags scripts pass (``--prefix DIR``, ``--dry_run true``, ``--run_only
    '["a"]'``, ...), as draccus would parse them, without importing draccus (kept under the complexity rule:
    ``bench/run.py``'s no-op rows, docs/performance.md). None for anything else (``--help``, ``--config_path``,
    YAML beyond plain words): then draccus parses it."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("--"):
            return None
        if "=" in arg:
            name, raw = arg[2:].split("=", 1)
            i += 1
        elif i + 1 < len(argv):
            name, raw = arg[2:], argv[i + 1]
            i += 2
        else:
            return None
        if name in values:
            return None
        value = _simple_value(name, raw)
        if value is _UNPARSED:
            return None
        values[name] = value
    return ExecutorMainConfig(**values)


_UNPARSED = object()


def _simple_value(name: str, raw: str) -> Any:
    if name in ("prefix", "executor_info_base_path"):
        if raw == "null":
            return None
        plain = _PLAIN_STRING.fullmatch(raw) and raw.lower() not in _YAML_WORDS
        return raw if plain else _UNPARSED
    if name in ("dry_run", "force_run_failed"):
        return {"true": True, "false": False}.get(raw.lower(), _UNPARSED)
    if name == "max_concurrent":
        if raw == "null":
            return None
        return int(raw) if raw.isascii() and raw.isdigit() else _UNPARSED
    if name == "run_only":
        if raw == "null":
            return None
        try:
            value = json.loads(raw) if raw.startswith("[") else None
        except ValueError:
            return _UNPARSED
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return value
        return _UNPARSED
    return _UNPARSED


def compute_output_path(
    name: str, config: Any, *, override_output_path: str | None = None, prefix: str | None = None
) -> str:
    """The output path a step with this name and config gets (no I/O)."""
    resolved = prefix if prefix is not None else default_prefix()
    executor = Executor(prefix=resolved, executor_info_base_path=os.path.join(resolved, "experiments"))
    step = ExecutorStep(name=name, fn=None, config=config, override_output_path=override_output_path)
    executor.compute_version(step)
    return executor.output_paths[step]


def materialize(config: ConfigT, *, prefix: str | None = None, output_path: str | None = None) -> ConfigT:
    """Build the steps embedded in ``config``, then return it with every placeholder resolved."""
    resolved = prefix if prefix is not None else default_prefix()
    steps = upstream_steps(config)
    output_paths: dict[ExecutorStep, str] = {}
    if steps:
        executor = Executor(prefix=resolved, executor_info_base_path=os.path.join(resolved, "experiments"))
        output_paths = executor.run(steps=steps)
    current = output_path if output_path is not None else getattr(config, "output_path", None)
    if isinstance(current, OutputName):
        raise TypeError(
            "materialize(config): config.output_path is still an OutputName placeholder; "
            "pass output_path= or resolve it first"
        )
    return instantiate_config(config, current, output_paths, resolved)
