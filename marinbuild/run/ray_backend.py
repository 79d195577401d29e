"""The Ray backend: each step's function runs as a Ray task with the resources it asks for.

Who does what:
- The driver (this process) holds every lease. A preparing thread takes the step's lease
  (``job.acquire``, which may wait for another runner), starts renewing it
  (``job.begin``) and launches the task; when the task ends, the driver commits the
  step (``job.commit``) or records its failure (``job.fail``). Only ``fn(config)`` runs
  in the task.
- Completion: Ray calls back when a task's result is ready (``ObjectRef.future()``), and
  a few finishing threads commit or fail the steps in the order they end; nothing sleeps
  or polls, and no thread is parked per task. (``ray.wait`` was the first design: but a
  thread blocked in it cannot see tasks launched after it started waiting, so it either
  wakes on a timer, which is polling, or more threads must wait for the newer tasks:
  hundreds of them in a 1,000-step fan-out, each scanning its list of refs.)
- Failures: a task whose worker process or node died is retried by Ray up to
  ``max_retries`` times (system failures only); an exception raised by the step's own
  code is never retried: it is the step's failure, the original exception with the
  remote traceback chained as its cause (``RemoteTraceback``). A step whose task died
  more than ``max_retries`` times fails with ``StepLostError``.
- Ctrl-C: ``shutdown(cancel=True)`` cancels every running task (``ray.cancel``, force)
  and the scheduler gives up the leases (``job.abandon``).
- Where: ``RayBackend(address)``, else ``RAY_ADDRESS``, connects to that cluster (the
  workspace is shipped as ``working_dir`` when ``working_dir`` is given and this is not
  already a submitted job); with neither, a local Ray instance is started in this
  process, bound to 127.0.0.1, with no dashboard, no token file and warnings only.
  ``ray`` is imported when the first step is submitted, so a no-op build never starts Ray.

Steps: a ``StepCall`` (what the executor makes) tells the function, config and request
(``ExecutorStep.resources``, a ``remote(...)`` wrapper, or a ``@ray.remote`` function's
own options). A BUILD target's function, ``run_target``, and its ``TargetConfig`` pickle
as they are; when the workspace was shipped and its driver path does not exist on the
worker, paths under it in the config are moved to the task's working directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import re
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.run.backend import Completion
from marinbuild.run.step_call import StepCall, is_ray_remote_function
from marinbuild.run.step_job import CACHED, RAN, StepJob

logger = logging.getLogger("marinbuild")

DEFAULT_MAX_RETRIES = 3
FINISH_THREADS = 4
PREPARE_THREADS = 4
"""Threads taking leases and launching tasks. Few on purpose: taking a free lease is a few file operations,
and more threads only contend for the interpreter; a step waiting for another runner's lease holds one of them."""


class StepLostError(RuntimeError):
    """A step's Ray task died (its worker or node was lost) more often than ``max_retries`` allows."""


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a Ray task, as text (chained as the exception's cause)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return self.text


@dataclass
class _Task:
    job: StepJob
    done: Completion
    ref: Any


@dataclass
class _Relocation:
    """Paths under ``root`` on the driver move to the task's working directory if ``root`` is missing there."""

    root: str


def _driver_code_path() -> list[str]:
    """Folders on this process's ``sys.path`` besides the interpreter's own and installed packages."""
    prefixes = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    out = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        if not os.path.isdir(path) or "site-packages" in path or "dist-packages" in path:
            continue
        if any(path == p or path.startswith(p + os.sep) for p in prefixes):
            continue
        if path not in out:
            out.append(path)
    return out


def _worker_output_to_stderr() -> None:
    """Show what tasks print on this process's stderr: stdout carries the build's results."""
    try:
        from ray._private import worker as ray_worker

        dispatcher = ray_worker.global_worker_stdstream_dispatcher
        if "ray_print_logs" not in [name for name, _ in dispatcher.handlers]:
            return  # log_to_driver=False

        def to_stderr(data: dict[str, Any]) -> None:
            ray_worker.print_to_stdstream({**data, "is_err": True}, ignore_prefix=False)

        dispatcher.remove_handler("ray_print_logs")
        dispatcher.add_handler("ray_print_logs", to_stderr)
    except Exception:  # a Ray without these internals: its output stays where Ray puts it
        logger.debug("could not send Ray task output to stderr", exc_info=True)


def _run_step(fn: Callable[[Any], Any], config: Any, relocation: _Relocation | None) -> Any:
    """The Ray task: the step's function on its config."""
    if relocation is not None and not os.path.exists(relocation.root):
        config = relocate_paths(config, relocation.root, os.getcwd())
    return fn(config)


def _task_for(fn: Callable[[Any], Any]) -> Callable[[Any, _Relocation | None], Any]:
    """The Ray task of the steps whose function is ``fn``."""

    def step(config: Any, relocation: _Relocation | None) -> Any:
        return _run_step(fn, config, relocation)

    step.__name__ = getattr(fn, "__name__", "step")  # (its qualname stays "...<locals>...": pickled by value)
    return step


def _run_call(call: Callable[[], Any]) -> Any:
    """The Ray task for a job whose call is not a ``StepCall``: any picklable callable."""
    return call()


def relocate_paths(value: Any, old_root: str, new_root: str) -> Any:
    """``value`` with every string path at or under ``old_root`` moved under ``new_root``."""
    old = old_root.rstrip("/")

    def move(v: Any) -> Any:
        if isinstance(v, str):
            if v == old or v.startswith(old + "/"):
                return new_root + v[len(old):]
            return v
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            changes = {f.name: move(getattr(v, f.name)) for f in dataclasses.fields(v) if f.init}
            return dataclasses.replace(v, **changes)
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return type(v)(move(x) for x in v)
        return v

    return move(value)


@dataclass
class RayBackend:
    """Steps as Ray tasks. See the module docstring."""

    address: str | None = None
    """A cluster to connect to (``host:port`` or ``ray://host:10001``); default ``RAY_ADDRESS``, else a local Ray."""
    max_retries: int = DEFAULT_MAX_RETRIES
    """Times Ray reruns a task whose worker or node died (not one whose code raised)."""
    working_dir: str | os.PathLike[str] | None = None
    """The workspace to ship to a cluster (``address`` or ``RAY_ADDRESS`` only; not inside a submitted job)."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """Environment variables of every task (the job's runtime env)."""
    log_to_driver: bool = True
    """Show the tasks' output on this process's stderr."""
    init_options: dict[str, Any] = field(default_factory=dict)
    """More keyword arguments for ``ray.init``."""
    prepare_threads: int = PREPARE_THREADS
    """Threads taking leases and launching tasks."""
    finish_threads: int = FINISH_THREADS
    """Threads committing finished steps (a commit digests the step's outputs, which takes a while for big ones)."""
    name: str = "ray"

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._connected = False
        self._remotes: dict[tuple[Any, bool], Any] = {}
        self._call_remote: Any = None
        self._relocation: _Relocation | None = None
        self._pyproject_root: Path | None = None
        self._work: queue.SimpleQueue[tuple[StepJob, Completion] | None] = queue.SimpleQueue()
        self._completed: queue.SimpleQueue[tuple[_Task, Any] | None] = queue.SimpleQueue()
        self._prep_threads = 0
        self._running: dict[int, _Task] = {}
        self._closed = False
        self._cancelled = False

    # -- connecting ---------------------------------------------------------------------------
    def connect(self) -> None:
        """Connect to the cluster (or start the local instance) once; later calls return at once."""
        if self._connected:
            return
        with self._connect_lock:
            if self._connected:
                return
            from marinbuild.runtime_env import project_root

            try:
                import ray  # noqa: F401
            except ImportError as exc:
                raise ImportError(f"the Ray backend needs Ray: pip install 'marinbuild[ray]' ({exc})") from exc

            ray_module = sys.modules.get("ray")
            if ray_module is None or not ray_module.is_initialized():
                address = self.address or os.environ.get("RAY_ADDRESS") or None
                if address:
                    self._init_cluster(address)
                else:
                    self._init_local()
            import ray

            self._call_remote = ray.remote(_run_call)
            self._pyproject_root = Path(self.working_dir) if self.working_dir is not None else project_root()
            self._connected = True

    def _base_options(self) -> dict[str, Any]:
        return {"logging_level": logging.WARNING, "log_to_driver": self.log_to_driver}

    def _init_cluster(self, address: str) -> None:
        import ray

        from marinbuild.runtime_env import in_ray_job, workspace_runtime_env

        options = self._base_options()
        if self.working_dir is not None and not in_ray_job():
            options["runtime_env"] = workspace_runtime_env(self.working_dir, self.env_vars)
            self._relocation = _Relocation(str(Path(self.working_dir).resolve()))
        elif self.env_vars:
            options["runtime_env"] = {"env_vars": dict(self.env_vars)}
        options.update(self.init_options)
        ray.init(address=address, **options)
        _worker_output_to_stderr()

    def _init_local(self) -> None:
        """A private instance on loopback, no dashboard; its workers import what this process can."""
        # Ray swaps 127.0.0.1 for this machine's address unless it is told there is no cluster to join; no
        # token file to write for a loopback instance, no usage report to send.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        import ray

        try:
            from ray._private import ray_constants

            ray_constants.ENABLE_RAY_CLUSTER = False  # if ray was imported before the variable was set
        except (ImportError, AttributeError):
            pass
        options = self._base_options()
        env_vars = dict(self.env_vars)
        code_path = _driver_code_path()
        if code_path:
            inherited = env_vars.get("PYTHONPATH", os.environ.get("PYTHONPATH"))
            env_vars["PYTHONPATH"] = os.pathsep.join([*code_path, *([inherited] if inherited else [])])
        if env_vars:
            options["runtime_env"] = {"env_vars": env_vars}
        options.update({"_node_ip_address": "127.0.0.1", "include_dashboard": False})
        options.update(self.init_options)
        hook = sys.excepthook
        ray.init(address="local", **options)
        # Ray's hook reports an uncaught exception of this process to its GCS, which can hold the exit for a
        # minute; nobody reads that report for a private instance.
        sys.excepthook = hook
        _worker_output_to_stderr()

    # -- the backend interface ----------------------------------------------------------------
    def submit(self, job: StepJob, done: Completion) -> None:
        self.connect()  # the first time in the scheduler's thread (ray.init sets signal handlers in the main one)
        with self._lock:
            if self._closed:
                raise RuntimeError("the Ray backend was shut down")
            start = self._prep_threads == 0
            if start:
                self._prep_threads = self.prepare_threads
        self._work.put((job, done))
        if start:
            for i in range(self.prepare_threads):
                threading.Thread(target=self._prepare_loop, name=f"marinbuild-ray-prepare-{i}", daemon=True).start()
            for i in range(self.finish_threads):
                threading.Thread(target=self._finish_loop, name=f"marinbuild-ray-finish-{i}", daemon=True).start()

    def shutdown(self, cancel: bool = False) -> None:
        with self._lock:
            self._closed = True
            running = list(self._running.values()) if cancel else []
            if cancel:
                self._cancelled = True
            threads, self._prep_threads = self._prep_threads, 0
            idle = not self._running
        for _ in range(threads):
            self._work.put(None)
        if threads and idle:
            for _ in range(self.finish_threads):
                self._completed.put(None)
        if running:
            import ray

            for task in running:
                try:
                    ray.cancel(task.ref, force=True)
                except Exception:  # already finished, or the cluster is gone
                    logger.debug("could not cancel %s", task.job.name, exc_info=True)

    def check_resources(self, resources: Any) -> str | None:
        """A cluster may gain any resource (an autoscaler adds nodes): only a malformed request is refused."""
        from marinbuild.resources import normalize

        try:
            normalize(resources)
        except (TypeError, ValueError) as exc:
            return str(exc)
        return None

    # -- preparing: lease, then launch ----------------------------------------------------------
    def _prepare_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            job, done = item
            try:
                self._prepare(job, done)
            except BaseException as exc:  # any error is this job's outcome
                done(job, None, exc)

    def _prepare(self, job: StepJob, done: Completion) -> None:
        if not job.acquire():
            done(job, CACHED, None)
            return
        try:
            job.begin()
            ref = self._launch(job)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt) or self._cancelled:
                job.abandon()
                done(job, None, exc if isinstance(exc, KeyboardInterrupt) else KeyboardInterrupt())
                return
            done(job, None, job.fail(exc))
            return
        task = _Task(job, done, ref)
        with self._lock:
            cancelled = self._cancelled
            if not cancelled:
                self._running[id(task)] = task
        if cancelled:
            self._cancel(task)
            return
        # Ray calls back (from its own thread) when the task's result is ready: no thread waits per task.
        ref.future().add_done_callback(lambda future, t=task: self._completed.put((t, future)))

    def _launch(self, job: StepJob) -> Any:
        from marinbuild.runtime_env import step_runtime_env

        call = job.call
        options: dict[str, Any] = {"max_retries": self.max_retries, "retry_exceptions": False, "name": job.name}
        if not isinstance(call, StepCall):
            return self._call_remote.options(**options).remote(call)
        resources, groups, env_vars = call.request()
        fresh = False
        if resources is not None:
            options.update(resources.to_ray_options())
            fresh = resources.fresh_worker
        runtime_env = step_runtime_env(groups, env_vars, self._pyproject_root)
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        fn = call.wrapped
        if is_ray_remote_function(fn):
            return fn.options(**options).remote(call.config)
        return self._remote_for(fn, fresh).options(**options).remote(call.config, self._relocation)

    def _remote_for(self, fn: Callable[[Any], Any], fresh: bool) -> Any:
        """One Ray remote function per step function: Ray ships it once, then each task only its config."""
        key = (fn, fresh)
        remote = self._remotes.get(key)
        if remote is None:
            import ray

            task = _task_for(fn)
            remote = ray.remote(max_calls=1)(task) if fresh else ray.remote(task)
            self._remotes[key] = remote
        return remote

    def _cancel(self, task: _Task) -> None:
        import ray

        try:
            ray.cancel(task.ref, force=True)
        except Exception:
            logger.debug("could not cancel %s", task.job.name, exc_info=True)
        task.job.abandon()
        task.done(task.job, None, KeyboardInterrupt())

    # -- finishing: commit or fail ----------------------------------------------------------------
    def _finish_loop(self) -> None:
        while True:
            item = self._completed.get()
            if item is None:
                return
            task, future = item
            try:
                self._finish(task, future)
            finally:
                with self._lock:
                    self._running.pop(id(task), None)
                    last = self._closed and not self._running
            if last:  # closed and nothing left to finish: stop the other finishing threads too
                for _ in range(self.finish_threads - 1):
                    self._completed.put(None)
                return

    def _finish(self, task: _Task, future: Any) -> None:
        from ray import exceptions as rex

        job, done = task.job, task.done
        try:
            result = future.result()
        except rex.TaskCancelledError:
            job.abandon()
            done(job, None, KeyboardInterrupt(f"{job.name}: cancelled"))
            return
        except rex.RayTaskError as exc:
            done(job, None, job.fail(_user_error(exc)))
            return
        except (rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError, rex.OutOfMemoryError,
                rex.LocalRayletDiedError) as exc:
            lost = StepLostError(f"its Ray task died {self.max_retries + 1} time(s) "
                                 f"(max_retries={self.max_retries}): {type(exc).__name__}: {exc}")
            lost.__cause__ = exc
            done(job, None, job.fail(lost))
            return
        except BaseException as exc:  # e.g. the runtime env could not be set up
            done(job, None, job.fail(exc))
            return
        try:
            job.commit(result)
        except BaseException as exc:
            done(job, None, exc)
            return
        done(job, RAN, None)


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _user_error(exc: BaseException) -> BaseException:
    """The exception the step's code raised, with the remote traceback chained as its cause.

    ``ray.get`` raises a ``RayTaskError`` that is also an instance of the step's exception
    type; its text is the remote traceback, its ``cause`` the exception itself.
    """
    cause = getattr(exc, "cause", None)
    if not isinstance(cause, BaseException) or cause is exc:
        return exc
    cause.__cause__ = RemoteTraceback(_ANSI.sub("", str(exc)).rstrip())
    return cause
