"""Marin's executor API (``marin.execution.executor``), a face of marinbuild's engine: change ``from
marin.execution.executor import ...`` to ``from marinbuild.executor import ...`` and a Marin script runs unchanged, with
the same versions, output paths and records (docs/marin-compat.md).

Only Marin's API lives here (``Executor``, ``executor_main`` and its flags, ``materialize``, ``compute_output_path``,
the names of ``__all__``). ``Executor`` subclasses ``Engine`` rather than wrapping it, so Marin's attributes are the
engine's own tables; it adds Marin's constructor, method names and ``override_output_path`` warning. A no-op loads no
backend."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from marinbuild.core.gc_control import skip_final_collection
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
from marinbuild.engine import Engine
from marinbuild.engine.build import build
from marinbuild.engine.code_records import sentence
from marinbuild.engine.errors import PreviousStepFailedError, PreviousTaskFailedError, StepFailedError
from marinbuild.engine.infos import ExecutorInfo, ExecutorStepInfo, caller_path, get_fn_name, git_commit, user
from marinbuild.engine.settings import Settings
from marinbuild.executor.remote import remote
from marinbuild.executor.step_spec import resolve_executor_step
from marinbuild.load.errors import WorkspaceError
from marinbuild.load.workspace import find_workspace
from marinbuild.store.fs import default_prefix
from marinbuild.store.status import STATUS_DEP_FAILED, STATUS_FAILED, STATUS_RUNNING, STATUS_SUCCESS

if TYPE_CHECKING:
    from marinbuild.load.workspace import Workspace
    from marinbuild.run.backend import Backend
    from marinbuild.run.events import Listener

__all__ = [
    "STATUS_DEP_FAILED", "STATUS_FAILED", "STATUS_RUNNING", "STATUS_SUCCESS", "THIS_OUTPUT_PATH", "Executor",
    "ExecutorFunction", "ExecutorInfo", "ExecutorMainConfig", "ExecutorStep", "ExecutorStepInfo", "InputName",
    "InputNameEvent", "MirroredValue", "OutputName", "PreviousStepFailedError", "PreviousTaskFailedError",
    "StepFailedError", "VersionedEvent", "VersionedValue", "asdict_without_description",
    "collect_dependencies_and_version", "compute_output_path", "default_prefix", "dependency_index_str",
    "ensure_versioned", "executor_main", "get_caller_path", "get_executor_step", "get_fn_name", "get_git_commit",
    "get_user", "instantiate_config", "materialize", "mirrored", "output_path_of", "remote", "resolve_executor_step",
    "resolve_local_placeholders", "this_output_path", "unwrap_versioned_value", "upstream_steps", "versioned",
    "walk_config"
]  # fmt: skip

logger = logging.getLogger("marinbuild")
ConfigT = TypeVar("ConfigT")

get_git_commit = git_commit
get_caller_path = caller_path
get_user = user


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


class Executor(Engine):
    """Computes versions and output paths of ``ExecutorStep``s and runs the ones not yet built.

    Its attributes have Marin's meanings. ``prefix`` and ``executor_info_base_path``, when None, are resolved as the
    command line's (``engine.settings``). Extra keyword arguments tune what Marin hard-codes: lease timing, listeners,
    backend (``engine.Engine``)."""

    def __init__(
        self,
        prefix: str | None,
        executor_info_base_path: str | None,
        description: str | None = None,
        *,
        heartbeat_interval: float | None = None,
        stale_after: float | None = None,
        listeners: list[Listener] | None = None,
        backend: Backend | str | None = None,
        keep_going: bool = True,
    ):
        settings = Settings.resolve(
            _workspace(),
            prefix=prefix,
            executor_info_base_path=executor_info_base_path,
            backend=backend if isinstance(backend, str) else None,
            keep_going=keep_going,
            heartbeat_interval=heartbeat_interval,
            stale_after=stale_after,
        )
        super().__init__(
            settings, description, listeners=listeners, backend=None if isinstance(backend, str) else backend
        )
        self._warned = 0

    def add(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        """``Engine.add``, then Marin's warning for a step placed by ``override_output_path``."""
        super().add(step, is_pseudo_dep)
        self._warn_new()

    def compute_version(self, step: ExecutorStep, is_pseudo_dep: bool = False) -> None:
        self.add(step, is_pseudo_dep)

    def compute_versions(self, steps: list[ExecutorStep], is_pseudo_dep: bool = False) -> None:
        """``compute_version`` of each step with the cyclic collector paused for the batch, as ``run`` does."""
        self.add_all(steps, is_pseudo_dep)

    def _warn_new(self) -> None:
        """Marin's warning for a step placed by ``override_output_path`` (BUILD targets declare it: none there)."""
        for step, computed, _override in self.table.override_mismatches[self._warned :]:
            logger.warning(
                "Output path %s doesn't match given override %s, using the latter.", computed, step.override_output_path
            )
        self._warned = len(self.table.override_mismatches)

    def get_infos(self) -> None:
        self.record_infos()

    def get_experiment_url(self) -> str:
        return self.experiment_url()


# -- entry points -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ExecutorMainConfig:
    prefix: str | None = None
    """Attached to every output path (a local folder or e.g. gs://bucket/path); default $MARIN_PREFIX."""
    executor_info_base_path: str | None = None  # Where the run's info JSON goes; default <prefix>/experiments.
    dry_run: bool = False
    force_run_failed: bool = True
    run_only: list[str] | None = None
    """Run only the steps whose names match these regexes (re.search), and what they need."""
    max_concurrent: int | None = None  # At most this many steps at once; default: every ready step.


def _executor_main(
    config: ExecutorMainConfig,
    steps: list[ExecutorStep],
    description: str | None = None,
    max_concurrent: int | None = None,
) -> Executor:
    """``executor_main`` with its config given: Marin's undecorated ``executor_main`` (``executor_main.__wrapped__``),
    same parameters; ``max_concurrent`` wins over ``config.max_concurrent``. Returns the executor (Marin's: None).

    The prefix and the rest are resolved as the command line resolves them (``marinbuild.engine.settings``), and
    the steps are built by the engine's one ``build``, which records the code each step ran."""
    skip_final_collection()
    if not logging.getLogger().handlers:  # Marin's INFO logs on stderr, unless the program has handlers
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    executor = Executor(config.prefix, config.executor_info_base_path, description)
    result = build(
        executor,
        steps,
        dry_run=config.dry_run,
        run_only=config.run_only,
        force_run_failed=config.force_run_failed,
        max_concurrent=max_concurrent if max_concurrent is not None else config.max_concurrent,
    )
    for step, files in result.code_changed.items():
        logger.warning("%s: %s (not part of its key, so not rebuilt)", step.name, sentence(files))
    if result.failure is not None:
        raise result.failure
    if not config.dry_run and executor.executor_info_path is not None:
        logger.info("Executor info written to %s", executor.executor_info_path)
    elif not config.dry_run:  # a no-op writes no run info: say so in one line, as the command line does
        logger.info("Nothing to do: all %d step(s) are built", len(result.plan or ()))
    return executor


def _workspace() -> Workspace | None:
    """The workspace around the current folder, or None: its ``[tool.marinbuild]`` applies to Marin scripts."""
    try:
        return find_workspace(".")
    except WorkspaceError:
        return None


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
        import draccus

        config = draccus.parse(ExecutorMainConfig, args=sys.argv[1:] if args is None else args)
    return _executor_main(config, steps, description, max_concurrent)


executor_main.__wrapped__ = _executor_main  # type: ignore[attr-defined]
"""As on Marin's ``@draccus.wrap()``-decorated ``executor_main`` (``functools.wraps``): the function that takes the
config itself, ``executor_main.__wrapped__(config, steps, description=None, max_concurrent=None)``."""


def compute_output_path(
    name: str, config: Any, *, override_output_path: str | None = None, prefix: str | None = None
) -> str:
    """The output path a step with this name and config gets (no I/O)."""
    executor = Executor(prefix, None)
    step = ExecutorStep(name=name, fn=None, config=config, override_output_path=override_output_path)
    executor.compute_version(step)
    return executor.output_paths[step]


def materialize(config: ConfigT, *, prefix: str | None = None, output_path: str | None = None) -> ConfigT:
    """Build the steps embedded in ``config``, then return it with every placeholder resolved."""
    executor = Executor(prefix, None)
    steps = upstream_steps(config)
    output_paths = executor.run(steps=steps) if steps else {}
    current = output_path if output_path is not None else getattr(config, "output_path", None)
    if isinstance(current, OutputName):
        raise TypeError(
            "materialize(config): config.output_path is still an OutputName placeholder; "
            "pass output_path= or resolve it first"
        )
    return instantiate_config(config, current, output_paths, executor.prefix)
