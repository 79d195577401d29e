"""The Ray backend: each step's function runs as a Ray task with the resources it asks for.

Who does what:
- The driver (this process) holds every lease. A preparing thread takes the step's lease
  (``job.acquire``, which may wait for another runner), starts renewing it
  (``job.begin``) and launches the task; when the task ends, the driver commits the
  step (``job.commit``) or records its failure (``job.fail``). Only ``fn(config)`` runs
  in the task.
- Completion: waiter threads block in ``ray.wait`` on the tasks they own; nothing
  sleeps or polls. A waiter blocked in ``ray.wait`` cannot see tasks launched after it
  started, so a launch wakes an idle waiter, or starts a new one when none is idle;
  each waiter adopts every newly launched task when it wakes, and goes idle when it has
  none left.
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
  ``ray`` is imported on the first launch, so a no-op build never starts Ray.

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
MAX_PREPARE_THREADS = 64
"""Threads taking leases at once; more only matter when many steps wait on other runners."""


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


def _run_step(fn: Callable[[Any], Any], config: Any, relocation: _Relocation | None) -> Any:
    """The Ray task: the step's function on its config."""
    if relocation is not None and not os.path.exists(relocation.root):
        config = relocate_paths(config, relocation.root, os.getcwd())
    return fn(config)


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
    name: str = "ray"

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        self._lock = threading.Condition()
        self._connect_lock = threading.Lock()
        self._connected = False
        self._remote: Any = None
        self._call_remote: Any = None
        self._relocation: _Relocation | None = None
        self._pyproject_root: Path | None = None
        self._work: queue.SimpleQueue[tuple[StepJob, Completion] | None] = queue.SimpleQueue()
        self._prep_threads = 0
        self._prep_idle = 0
        self._launched: list[_Task] = []
        self._idle_waiters = 0
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
            import ray

            from marinbuild.runtime_env import in_ray_job, project_root, workspace_runtime_env

            address = self.address or os.environ.get("RAY_ADDRESS") or None
            if not ray.is_initialized():
                options: dict[str, Any] = {"logging_level": logging.WARNING, "log_to_driver": self.log_to_driver}
                if address:
                    if self.working_dir is not None and not in_ray_job():
                        options["runtime_env"] = workspace_runtime_env(self.working_dir, self.env_vars)
                        self._relocation = _Relocation(str(Path(self.working_dir).resolve()))
                    elif self.env_vars:
                        options["runtime_env"] = {"env_vars": dict(self.env_vars)}
                    options.update(self.init_options)
                    ray.init(address=address, **options)
                else:
                    # A private instance on loopback: no token file to write, no usage report to send.
                    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
                    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                    if self.env_vars:
                        options["runtime_env"] = {"env_vars": dict(self.env_vars)}
                    options.update({"_node_ip_address": "127.0.0.1", "include_dashboard": False})
                    options.update(self.init_options)
                    ray.init(address="local", **options)
            self._remote = ray.remote(_run_step)
            self._call_remote = ray.remote(_run_call)
            self._pyproject_root = Path(self.working_dir) if self.working_dir is not None else project_root()
            self._connected = True

    # -- the backend interface ----------------------------------------------------------------
    def submit(self, job: StepJob, done: Completion) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("the Ray backend was shut down")
            spawn = self._prep_idle == 0 and self._prep_threads < MAX_PREPARE_THREADS
            if spawn:
                self._prep_threads += 1
            elif self._prep_idle:
                self._prep_idle -= 1
        self._work.put((job, done))
        if spawn:
            threading.Thread(target=self._prepare_loop, name="marinbuild-ray-prepare", daemon=True).start()

    def shutdown(self, cancel: bool = False) -> None:
        with self._lock:
            self._closed = True
            running = list(self._running.values()) if cancel else []
            if cancel:
                self._cancelled = True
            threads = self._prep_threads
            self._lock.notify_all()
        for _ in range(threads):
            self._work.put(None)
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
            except BaseException as exc:  # noqa: BLE001 - any error is this job's outcome
                done(job, None, exc)
            with self._lock:
                self._prep_idle += 1

    def _prepare(self, job: StepJob, done: Completion) -> None:
        if not job.acquire():
            done(job, CACHED, None)
            return
        try:
            self.connect()
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
                self._launched.append(task)
                spawn = self._idle_waiters == 0
                if spawn:
                    self._idle_waiters += 1  # the new waiter counts as idle: it takes every launched task
                self._lock.notify()
        if cancelled:
            self._cancel(task)
            return
        if spawn:
            threading.Thread(target=self._wait_loop, name="marinbuild-ray-wait", daemon=True).start()

    def _launch(self, job: StepJob) -> Any:
        from marinbuild.runtime_env import step_runtime_env

        call = job.call
        options: dict[str, Any] = {"max_retries": self.max_retries, "retry_exceptions": False, "name": job.name}
        if not isinstance(call, StepCall):
            return self._call_remote.options(**options).remote(call)
        resources, groups, env_vars = call.request()
        if resources is not None:
            options.update(resources.to_ray_options())
        runtime_env = step_runtime_env(groups, env_vars, self._pyproject_root)
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        fn = call.wrapped
        if is_ray_remote_function(fn):
            return fn.options(**options).remote(call.config)
        return self._remote.options(**options).remote(fn, call.config, self._relocation)

    def _cancel(self, task: _Task) -> None:
        import ray

        try:
            ray.cancel(task.ref, force=True)
        except Exception:
            logger.debug("could not cancel %s", task.job.name, exc_info=True)
        task.job.abandon()
        task.done(task.job, None, KeyboardInterrupt())

    # -- completion: ray.wait in waiter threads -------------------------------------------------
    def _wait_loop(self) -> None:
        import ray

        pending: dict[Any, _Task] = {}
        first = True
        while True:
            with self._lock:
                if first:
                    self._idle_waiters -= 1  # the count its launcher made for it
                    first = False
                while not self._launched and not pending:
                    if self._closed:
                        return
                    self._idle_waiters += 1
                    self._lock.wait()
                    self._idle_waiters -= 1
                for task in self._launched:
                    pending[task.ref] = task
                self._launched.clear()
            refs = list(pending)
            ready, rest = ray.wait(refs, num_returns=1)
            if rest:
                more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
                ready.extend(more)
            for ref in ready:
                self._finish(pending.pop(ref))

    def _finish(self, task: _Task) -> None:
        import ray
        from ray import exceptions as rex

        job, done = task.job, task.done
        try:
            try:
                result = ray.get(task.ref)
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
        finally:
            with self._lock:
                self._running.pop(id(task), None)


def _user_error(exc: Any) -> BaseException:
    """The exception the step's code raised, with the remote traceback as its cause."""
    cause = getattr(exc, "cause", None)
    if not isinstance(cause, BaseException):
        cause = exc
    text = getattr(exc, "traceback_str", None)
    if text and cause is not exc:
        cause.__cause__ = RemoteTraceback(str(text).rstrip())
        where = f"raised in a Ray task (pid {getattr(exc, 'pid', '?')}, node {getattr(exc, 'ip', '?')})"
        cause.add_note(where)
    return cause
