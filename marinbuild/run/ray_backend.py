"""The Ray backend: each step's function runs as a Ray task with the resources it asks for.

Who does what (the driver, this process, holds every lease; only ``fn(config)`` runs in the task):
- Preparing threads take each step's lease (``job.acquire``, which may wait for another
  runner) and start renewing it (``job.begin``).
- One driver loop launches the prepared steps' tasks and reacts to their completion with
  ``ray.wait(num_returns=1, fetch_local=False)`` over every launched task plus a *bell*,
  never by sleeping. A step prepared while the loop waits rings the bell: the bell is a
  pending call to a small actor (``_BellActor``, one per driver process, no CPUs) that
  returns when rung, so the loop wakes at once (a cheaper bell, cancelling a task that
  waits on a never-ready argument, trips a Ray reference-counting check when that
  argument's actor exits). Rings are rare: the loop only waits when no prepared step is
  queued, and it launches every step queued when it wakes (30 rings for the 1,000-step
  fan-out of ``bench/ray_bench.py``).
- Launch window: ``ray.wait`` costs about 0.45 us per ref it is given, so waiting on every
  launched task is quadratic in a fan-out (0.25 s of CPU for 1,000 steps, 2.5 s for
  4,000). The loop keeps at most ``launch_window`` tasks of each resource shape launched
  (4 per CPU of the cluster, at least 64: several times what can run) and launches the
  next one of that shape as one ends; one shape never holds up another.
- Finishing threads ``ray.get`` each ended task and commit the step (``job.commit``) or
  record its failure (``job.fail``), in the order tasks end.
- Measured against the first design (``ObjectRef.future()`` callbacks into finishing
  threads) on the bench's fan-out, both in one process, three times: ray.wait 2.23x,
  1.92x and 2.16x plain Ray; callbacks 2.45x, 1.92x and 2.32x. Most of the driver's time
  per step is the engine's (lease, status, info, record files), not Ray's or this loop's.
- Failures: a task whose worker process or node died is retried by Ray up to
  ``max_retries`` times (system failures only); an exception raised by the step's own
  code is never retried: it is the step's failure, the original exception with the
  remote traceback chained as its cause (``RemoteTraceback``). A step whose task died
  more than ``max_retries`` times fails with ``StepLostError``.
- Ctrl-C: ``shutdown(cancel=True)`` cancels every launched task (``ray.cancel``, force),
  steps not launched yet are not launched, and every lease is given up (``job.abandon``).
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
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.run.backend import Completion
from marinbuild.run.step_call import MirrorScope, StepCall, is_ray_remote_function
from marinbuild.run.step_job import CACHED, RAN, StepJob

logger = logging.getLogger("marinbuild")

DEFAULT_MAX_RETRIES = 3
MIN_LAUNCH_WINDOW = 64
LAUNCH_WINDOW_PER_CPU = 4
"""Tasks of one resource shape launched at once: 4 per CPU of the cluster, at least 64 (see ``launch_window``)."""
WINDOW_REFRESH = 60.0
"""Seconds between reads of the cluster's CPUs (an autoscaler grows it), and only while a shape is at its window."""
FINISH_THREADS = 4
PREPARE_THREADS = 4
"""Threads taking leases (the driver loop launches). Few on purpose: taking a free lease is a few file operations,
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
    shape: Hashable = None


@dataclass
class _Launch:
    """A prepared step (its lease held) and how to launch its task."""

    job: StepJob
    done: Completion
    shape: Hashable
    submit: Callable[[], Any]


class _BellActor:
    """A Ray actor: ``wait(key, seen)`` returns once ``ring(key)`` was called more than ``seen`` times."""

    def __init__(self) -> None:
        self._rings: dict[str, int] = {}
        self._changed: Any = None

    def _condition(self) -> Any:
        import asyncio

        if self._changed is None:  # made in the actor's event loop
            self._changed = asyncio.Condition()
        return self._changed

    async def wait(self, key: str, seen: int) -> int:
        changed = self._condition()
        async with changed:
            await changed.wait_for(lambda: self._rings.get(key, 0) > seen)
            return self._rings[key]

    async def ring(self, key: str) -> None:
        changed = self._condition()
        async with changed:
            self._rings[key] = self._rings.get(key, 0) + 1
            changed.notify_all()


@dataclass(frozen=True)
class _Bell:
    """A driver loop's pending ``wait`` on the bell actor: ringing it wakes the loop out of ``ray.wait``."""

    actor: Any
    key: str
    ref: Any

    def ring(self) -> None:
        try:
            self.actor.ring.remote(self.key)
        except Exception:  # Ray is gone: so is the loop's wait
            logger.debug("could not ring the driver loop's bell", exc_info=True)


class _Bells:
    """The bell actor of this driver process (one per Ray session; no CPUs, beside the driver if it can be)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._session: Any = None
        self._actor: Any = None

    def new(self, key: str, seen: int, previous: Any = None) -> tuple[_Bell, int]:
        """A bell for ``key`` after ``seen`` rings of the ``previous`` bell's actor.

        Returns the bell and its ``seen``: 0 if its actor is not the previous one (a new actor counts from 0).
        """
        import ray

        with self._lock:
            session = ray.get_runtime_context().get_job_id()
            if self._actor is None or self._session != session:
                options: dict[str, Any] = {"num_cpus": 0, "max_restarts": 0}
                try:
                    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                    node = ray.get_runtime_context().get_node_id()
                    options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=True)
                except Exception:
                    logger.debug("no node affinity for the bell actor", exc_info=True)
                self._actor = ray.remote(_BellActor).options(**options).remote()
                self._session = session
            actor = self._actor
        if actor is not previous:
            seen = 0
        return _Bell(actor, key, actor.wait.remote(key, seen)), seen

    def lose(self, actor: Any) -> None:
        """``actor`` died: the next bell gets a new one."""
        with self._lock:
            if self._actor is actor:
                self._actor = None


_BELLS = _Bells()


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


def _run_step(fn: Callable[[Any], Any], config: Any, relocation: _Relocation | None,
              mirror: MirrorScope | None = None) -> Any:
    """The Ray task: the step's function on its config, in the step's ``mirror://`` scope (its own budget)."""
    if relocation is not None and not os.path.exists(relocation.root):
        config = relocate_paths(config, relocation.root, os.getcwd())
    return (mirror or MirrorScope()).run(fn, config)


def _task_for(fn: Callable[[Any], Any]) -> Callable[[Any, _Relocation | None, MirrorScope | None], Any]:
    """The Ray task of the steps whose function is ``fn``."""

    def step(config: Any, relocation: _Relocation | None, mirror: MirrorScope | None = None) -> Any:
        return _run_step(fn, config, relocation, mirror)

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
    """Threads taking leases."""
    finish_threads: int = FINISH_THREADS
    """Threads committing finished steps (a commit digests the step's outputs, which takes a while for big ones)."""
    launch_window: int | None = None
    """Tasks of one resource shape launched and not yet ended, at most; more wait in the driver, their lease held,
    until one ends. It bounds what each ``ray.wait`` looks at. None: 4 per CPU of the cluster, at least 64."""
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
        self._cv = threading.Condition(self._lock)
        self._work: queue.SimpleQueue[tuple[StepJob, Completion] | None] = queue.SimpleQueue()
        """Submitted jobs, for the preparing threads."""
        self._to_launch: list[tuple[StepJob, Completion]] = []
        """Jobs holding their lease, for the driver loop to launch (guarded by ``_cv``)."""
        self._finished: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        """Tasks that ended, for the finishing threads."""
        self._running: dict[int, _Task] = {}
        """Launched tasks not yet finished: what Ctrl-C cancels."""
        self._bell: _Bell | None = None
        """The loop's bell while it blocks in ``ray.wait`` (None otherwise, or once it was rung)."""
        self._outstanding = 0
        """Jobs submitted whose completion was not reported yet."""
        self._started = False
        self._stopping = False
        self._window_size = MIN_LAUNCH_WINDOW
        self._window_checked = -WINDOW_REFRESH
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
        with self._cv:
            if self._closed:
                raise RuntimeError("the Ray backend was shut down")
            self._outstanding += 1
            start, self._started = not self._started, True
        self._work.put((job, done))
        if start:
            threading.Thread(target=self._loop, name="marinbuild-ray-loop", daemon=True).start()
            for i in range(self.prepare_threads):
                threading.Thread(target=self._prepare_loop, name=f"marinbuild-ray-prepare-{i}", daemon=True).start()
            for i in range(self.finish_threads):
                threading.Thread(target=self._finish_loop, name=f"marinbuild-ray-finish-{i}", daemon=True).start()

    def shutdown(self, cancel: bool = False) -> None:
        with self._cv:
            self._closed = True
            running = [task.ref for task in self._running.values()] if cancel else []
            if cancel:
                self._cancelled = True
            bell = self._take_bell() if cancel else None  # the loop collects the cancelled tasks
            idle = self._outstanding == 0
        if idle:
            self._stop()
        if running:
            import ray

            for ref in running:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # already finished, or the cluster is gone
                    logger.debug("could not cancel a task", exc_info=True)
        if bell is not None:
            bell.ring()

    def check_resources(self, resources: Any) -> str | None:
        """A cluster may gain any resource (an autoscaler adds nodes): only a malformed request is refused."""
        from marinbuild.resources import normalize

        try:
            normalize(resources)
        except (TypeError, ValueError) as exc:
            return str(exc)
        return None

    def _complete(self, done: Completion, job: StepJob, outcome: str | None, error: BaseException | None) -> None:
        """Report a job's end; once the backend is closed and nothing is left, its threads stop."""
        try:
            done(job, outcome, error)
        finally:
            with self._cv:
                self._outstanding -= 1
                last = self._closed and self._outstanding == 0
            if last:
                self._stop()

    def _stop(self) -> None:
        with self._cv:
            if self._stopping or not self._started:
                self._stopping = True
                return
            self._stopping = True
            self._cv.notify_all()
        for _ in range(self.prepare_threads):
            self._work.put(None)
        for _ in range(self.finish_threads):
            self._finished.put(None)

    # -- preparing: take the lease ----------------------------------------------------------------
    def _prepare_loop(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            job, done = item
            try:
                if not job.acquire():
                    self._complete(done, job, CACHED, None)
                    continue
            except BaseException as exc:  # any error is this job's outcome
                self._complete(done, job, None, exc)
                continue
            if self._cancelled:
                job.abandon()
                self._complete(done, job, None, KeyboardInterrupt())
                continue
            try:
                job.begin()
            except BaseException as exc:
                self._complete(done, job, None, job.fail(exc))
                continue
            with self._cv:  # hand it to the loop: wake it from ray.wait, or from its idle wait
                self._to_launch.append((job, done))
                bell = self._take_bell()
                self._cv.notify()
            if bell is not None:
                bell.ring()

    # -- the driver loop: launch, ray.wait, hand over --------------------------------------------
    def _take_bell(self) -> _Bell | None:
        """The bell to ring to wake the loop out of ``ray.wait`` (None: it is not waiting, or was rung already)."""
        bell, self._bell = self._bell, None
        return bell

    def _loop(self) -> None:
        """Launch prepared steps; ``ray.wait`` on the running tasks (and a bell); hand the ended ones on."""
        import ray

        in_flight: dict[Any, _Task] = {}
        backlog: dict[Hashable, deque[_Launch]] = {}
        """Per resource shape, prepared steps waiting for room in its launch window."""
        launched: Counter[Hashable] = Counter()
        key = uuid.uuid4().hex
        bell: _Bell | None = None
        actor: Any = None
        seen = 0
        """Rings of this loop's bell in ``actor`` so far."""

        def launch(item: _Launch) -> None:
            if launched[item.shape] >= self._window(launched[item.shape]):
                backlog.setdefault(item.shape, deque()).append(item)
                return
            task = self._start(item)
            if task is not None:
                in_flight[task.ref] = task
                launched[item.shape] += 1

        while True:
            with self._cv:
                while not self._to_launch and not in_flight and not self._stopping:
                    self._cv.wait()
                if self._stopping and not self._to_launch and not in_flight:
                    if bell is not None:  # end its wait in the actor
                        bell.ring()
                    return
                batch, self._to_launch = self._to_launch, []
            for job, done in batch:
                item = self._plan(job, done)
                if item is not None:
                    launch(item)
            if self._cancelled and backlog:
                for items in backlog.values():
                    for item in items:
                        item.job.abandon()
                        self._complete(item.done, item.job, None, KeyboardInterrupt())
                backlog.clear()
            if not in_flight:
                continue
            try:
                if bell is None:
                    bell, seen = _BELLS.new(key, seen, actor)
                    actor = bell.actor
                with self._cv:  # armed in the same breath as the check: a step handed over after it rings
                    if self._to_launch:
                        continue
                    self._bell = bell
                ready, _ = ray.wait([*in_flight, bell.ref], num_returns=1, fetch_local=False)
            except Exception:  # the cluster is gone: each task's ray.get says how
                logger.warning("the Ray backend lost its cluster", exc_info=True)
                ready, bell = list(in_flight), None
            with self._cv:
                if self._bell is None:  # rung (once): its wait returns, the next one waits for the next ring
                    bell, seen = None, seen + 1
                self._bell = None
            for ref in ready:
                task = in_flight.pop(ref, None)
                if task is not None:
                    self._finished.put(task)
                    launched[task.shape] -= 1
                    waiting = backlog.pop(task.shape, None)
                    while waiting and launched[task.shape] < self._window(launched[task.shape]):
                        launch(waiting.popleft())  # (one whose launch failed leaves room for the next)
                    if waiting:
                        backlog[task.shape] = waiting
                elif bell is not None and ref == bell.ref:  # ready unrung: only if its actor died
                    logger.warning("the Ray backend's bell actor died; starting another")
                    _BELLS.lose(bell.actor)
                    bell = None

    def _window(self, launched: int) -> int:
        """Tasks of one resource shape the loop keeps launched (the cluster's CPUs are read again when it matters)."""
        if self.launch_window is not None:
            return self.launch_window
        now = time.monotonic()
        if launched >= self._window_size and now >= self._window_checked + WINDOW_REFRESH:
            import ray

            self._window_checked = now
            try:
                cpus = float(ray.cluster_resources().get("CPU", 0))
            except Exception:
                logger.debug("could not read the cluster's resources", exc_info=True)
            else:
                self._window_size = max(MIN_LAUNCH_WINDOW, int(LAUNCH_WINDOW_PER_CPU * cpus))
        return self._window_size

    def _plan(self, job: StepJob, done: Completion) -> _Launch | None:
        """How to launch ``job`` (None if it ended here: the build was cancelled, or its options are bad)."""
        try:
            if self._cancelled:
                raise KeyboardInterrupt
            shape, submit = self._launcher(job)
        except BaseException as exc:
            self._end_unlaunched(job, done, exc)
            return None
        return _Launch(job, done, shape, submit)

    def _end_unlaunched(self, job: StepJob, done: Completion, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt) or self._cancelled:
            job.abandon()
            self._complete(done, job, None, exc if isinstance(exc, KeyboardInterrupt) else KeyboardInterrupt())
        else:
            self._complete(done, job, None, job.fail(exc))

    def _start(self, item: _Launch) -> _Task | None:
        """Launch ``item``'s task (None if it ended here: launching failed, or the build was cancelled)."""
        try:
            if self._cancelled:
                raise KeyboardInterrupt
            ref = item.submit()
        except BaseException as exc:
            self._end_unlaunched(item.job, item.done, exc)
            return None
        task = _Task(item.job, item.done, ref, item.shape)
        with self._cv:
            cancelled = self._cancelled
            self._running[id(task)] = task
        if cancelled:  # Ctrl-C came while launching: its ref ends as cancelled, and the finishing thread says so
            self._cancel_ref(ref)
        return task

    def _launcher(self, job: StepJob) -> tuple[Hashable, Callable[[], Any]]:
        """The resource shape of ``job``'s task (what it asks of the cluster), and what launches the task."""
        from marinbuild.runtime_env import step_runtime_env

        call = job.call
        options: dict[str, Any] = {"max_retries": self.max_retries, "retry_exceptions": False, "name": job.name}
        if not isinstance(call, StepCall):
            return "call", lambda: self._call_remote.options(**options).remote(call)
        resources, groups, env_vars = call.request()
        fresh = False
        if resources is not None:
            options.update(resources.to_ray_options())
            fresh = resources.fresh_worker
        runtime_env = step_runtime_env(groups, env_vars, self._pyproject_root)
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        fn = call.wrapped
        asks = {k: v for k, v in options.items() if k not in ("name", "runtime_env", "max_retries", "retry_exceptions")}
        if is_ray_remote_function(fn):
            return (id(fn), repr(sorted(asks.items()))), lambda: fn.options(**options).remote(call.config)
        remote = self._remote_for(fn, fresh)
        return (None, repr(sorted(asks.items()))), lambda: remote.options(**options).remote(
            call.config, self._relocation, call.mirror)

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

    @staticmethod
    def _cancel_ref(ref: Any) -> None:
        import ray

        try:
            ray.cancel(ref, force=True)
        except Exception:
            logger.debug("could not cancel a task", exc_info=True)

    # -- finishing: commit or fail ----------------------------------------------------------------
    def _finish_loop(self) -> None:
        while True:
            task = self._finished.get()
            if task is None:
                return
            try:
                self._finish(task)
            finally:
                with self._cv:
                    self._running.pop(id(task), None)

    def _finish(self, task: _Task) -> None:
        import ray
        from ray import exceptions as rex

        job, done = task.job, task.done
        try:
            result = ray.get(task.ref)
        except BaseException as exc:
            if isinstance(exc, rex.TaskCancelledError | KeyboardInterrupt) or self._cancelled:
                job.abandon()
                self._complete(done, job, None, KeyboardInterrupt(f"{job.name}: cancelled"))
            elif isinstance(exc, rex.RayTaskError):
                self._complete(done, job, None, job.fail(_user_error(exc)))
            elif isinstance(exc, rex.WorkerCrashedError | rex.NodeDiedError | rex.ObjectLostError
                            | rex.OutOfMemoryError | rex.LocalRayletDiedError):
                lost = StepLostError(f"its Ray task died {self.max_retries + 1} time(s) "
                                     f"(max_retries={self.max_retries}): {type(exc).__name__}: {exc}")
                lost.__cause__ = exc
                self._complete(done, job, None, job.fail(lost))
            else:  # e.g. the runtime env could not be set up
                self._complete(done, job, None, job.fail(exc))
            return
        try:
            job.commit(result)
        except BaseException as exc:
            self._complete(done, job, None, exc)
            return
        self._complete(done, job, RAN, None)


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
