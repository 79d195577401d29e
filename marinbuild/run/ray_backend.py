"""The Ray backend's driver: each step's function runs in a Ray task with the resources it asks for.

Who does what:
- The driver (this process) holds every lease. It takes a step's lease (which makes the output
  folder), renews it while the task runs, and releases it when the task ends; if the step's code
  raised or its task was lost, it writes FAILED under the lease, as the local backend does.
- The task (``marinbuild.run.ray_task``) writes RUNNING and ``.executor_info``, runs the step, and
  commits as ``StepJob.commit`` does, after a read-only check that the lease file still names the
  driver: a task whose driver lost the lease writes no SUCCESS. Why the task and not the driver:
  the files of a step are most of its cost, the driver is one process, tasks spread over the cluster.
- The driver loop (``_DriverLoop``, one thread) takes local leases and launches while each resource
  shape has room in its launch window, sleeps until a task ends (its future's callback) or another
  thread hands it work, and finishes the task. Lease threads take the lease work that waits: a lease
  another runner holds, and every lease on an object store (a request per operation).
- One Ray task per step: its function, its resources, its payload (``marinbuild.run.ray_task``).
- Failures: Ray retries a task whose worker or node died (``max_retries``), never one whose code
  raised; Ctrl-C cancels every launched task and gives every lease up.
- Where: ``marinbuild.run.ray_connect``; ``ray`` is imported when the first step is submitted, so a
  no-op build never starts Ray. A local prefix must be on a file system every node shares (a task
  that cannot see its output folder raises ``OutputFolderMissingError``)."""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from marinbuild.core.resources import normalize
from marinbuild.run import events as ev
from marinbuild.run import ray_log, shipped_code
from marinbuild.run.backend import Completion
from marinbuild.run.failure import RemoteTraceback
from marinbuild.run.ray_connect import connect_ray
from marinbuild.run.ray_progress import ProgressRelay
from marinbuild.run.ray_task import LAST_REPORT, EngineError, Relocation, pickle_payload, run_call, task_for
from marinbuild.run.runtime_env import project_root, step_runtime_env
from marinbuild.run.step_call import StepCall, is_ray_remote_function
from marinbuild.run.step_job import CACHED, RAN, Attempt, JobOutcome, StepJob
from marinbuild.store import status as st

logger = logging.getLogger("marinbuild")

DEFAULT_MAX_RETRIES = 3
MIN_LAUNCH_WINDOW = 64
LAUNCH_WINDOW_PER_CPU = 4
"""Tasks of one resource shape launched or being prepared at once: 4 per CPU of the cluster, at least 64. Several
times what can run, and a bound on the leases held for tasks that wait for a worker."""
WINDOW_REFRESH = 60.0  # seconds between reads of the cluster's resources (an autoscaler grows it)
LEASE_THREADS = 8
"""Threads for lease work that waits (another runner's lease; a lease on an object store, a request per operation),
started when first needed; local leases are taken and released on the loop's thread."""


class StepLostError(RuntimeError):
    """A step's Ray task died (its worker or node was lost) more often than ``max_retries`` allows."""


class StepImportError(RuntimeError):
    """A Ray worker could not rebuild the step's function (its module does not import there): the message says
    why in its first line (Ray's own words, with the worker's ``sys.path``, follow; the traceback is the cause)."""


@dataclass(eq=False)
class _Shape:
    """The tasks of one step function, resources and extras: what they ask for, and their remote."""

    fn: Any  # ``fn`` and ``resources`` are kept: the cache is keyed on their ids
    resources: Any
    key: Hashable  # what the launch window counts tasks by: what they ask of the cluster
    remote: Any  # the remote of a step's task (options applied)


@dataclass
class _Launch:
    """A prepared step (its lease held) and what its task needs; once launched, its task."""

    job: StepJob
    done: Completion
    key: Hashable  # its shape's window key
    shape: _Shape | None  # None: a job whose call is not a ``StepCall`` (``run_call``)
    payload: bytes
    ref: Any = None  # the launched task's result


@dataclass(frozen=True)
class _Verdict:
    """How one step's task ended, as the driver reads it, before it finishes the step accordingly."""

    kind: str
    """``ran``; ``engine`` (marinbuild's own error in the task: ``error`` as is); ``raised`` (the step's code: FAILED);
    ``lost`` (its task died: SUCCESS if it ran, else FAILED); ``cancelled``; ``failed`` (any other error: FAILED)."""
    error: BaseException | None = None
    report: str | None = None  # ``ran`` or ``raised``: the step's last progress report (JSON, ``run_under_lease``)


@dataclass
class RayBackend:
    """Steps as Ray tasks. See the module docstring."""

    address: str | None = None
    """A cluster to connect to (``host:port`` or ``ray://host:10001``); default ``RAY_ADDRESS``, else a local Ray."""
    max_retries: int = DEFAULT_MAX_RETRIES
    """Times Ray reruns a task whose worker or node died (not one whose code raised)."""
    working_dir: str | os.PathLike[str] | None = None
    """The workspace: shipped to a cluster as ``working_dir`` (``address`` or ``RAY_ADDRESS``; not inside a submitted
    job); on the ``PYTHONPATH`` of a local instance's workers."""
    env_vars: dict[str, str] = field(default_factory=dict)
    """Environment variables of every task (the job's runtime env)."""
    log_to_driver: bool = True
    """Show the tasks' output on this process's stderr."""
    verbose: bool | None = None
    """Show Ray's own messages on the console too (they always go to ``log_path``); None: ``$MARINBUILD_VERBOSE``."""
    log_path: str | os.PathLike[str] | None = None
    """Where Ray's own messages go (``marinbuild.run.ray_log``); None: ``<working_dir>/.marinbuild/logs/ray.log``,
    or ``marinbuild-ray.log`` in the temporary folder."""
    init_options: dict[str, Any] = field(default_factory=dict)
    """More keyword arguments for ``ray.init``."""
    lease_threads: int = LEASE_THREADS
    """Threads for lease work that waits (another runner's lease; leases on GCS, a request each)."""
    launch_window: int | None = None
    """Tasks of one resource shape launched and not yet ended, or being prepared, at most (each holding the lease of
    its step); more steps wait in the driver, without a lease, until one ends. None: 4 per CPU of the cluster, at
    least 64."""
    name: str = "ray"

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {self.max_retries}")
        self._lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._connected = False
        self._remotes: dict[tuple[Any, bool], Any] = {}
        """Per step function (and whether it needs a fresh worker): its Ray remote function."""
        self._shapes: dict[tuple[int, int, tuple[str, ...]], _Shape] = {}
        """Per (function, resources, extras) of a ``StepCall``: its resource shape and remote with options."""
        self._shapes_lock = threading.Lock()
        self._relay: ProgressRelay | None = None
        self._call_remote: Any = None
        self._relocation: Relocation | None = None
        self._pyproject_root: Path | None = None
        self._cv = threading.Condition(self._lock)
        self._inbox: list[tuple[StepJob, Completion]] = []
        """Submitted jobs, for the driver loop (guarded by ``_cv``, as everything the loop shares)."""
        self._prepared: list[tuple[Hashable, _Launch | None]] = []
        """Jobs whose lease a lease thread took, ready to launch (None: the job ended there)."""
        self._lease_work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lease_threads = 0
        self._running: dict[int, _Launch] = {}
        """Launched tasks not yet finished: what Ctrl-C cancels."""
        self._ended: list[tuple[_Launch, Future[Any]]] = []
        """Launched tasks that ended, with their futures, for the driver loop."""
        self._outstanding = 0
        """Jobs submitted whose completion was not reported yet."""
        self._started = False
        self._stopping = False
        self._window_size = MIN_LAUNCH_WINDOW
        self._totals: dict[str, float] = {}
        """The cluster's resources, as last read (``_cluster_totals``)."""
        self._totals_read = -WINDOW_REFRESH
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

            try:
                import ray  # noqa: F401
            except ImportError as exc:
                raise ImportError(f"the Ray backend needs Ray: pip install 'marinbuild[ray]' ({exc})") from exc

            ray_module = sys.modules.get("ray")
            if ray_module is None or not ray_module.is_initialized():
                verbose = ray_log.verbose_from_env() if self.verbose is None else self.verbose
                env_vars = {**self.env_vars, ray_log.VERBOSE_ENV: "1"} if verbose else self.env_vars
                log = ray_log.RayLog(self.log_path or ray_log.default_log_path(self.working_dir), verbose)
                self._relocation = connect_ray(
                    self.address,
                    working_dir=self.working_dir,
                    env_vars=env_vars,
                    log_to_driver=self.log_to_driver,
                    init_options=self.init_options,
                    log=log,
                )
            import ray

            shipped_code.ship_main_siblings(self.working_dir)
            shipped_code.register_with_ray()
            self._call_remote = ray.remote(run_call).options(**self._task_options())
            self._pyproject_root = Path(self.working_dir) if self.working_dir is not None else project_root()
            self._connected = True

    # -- the backend interface ----------------------------------------------------------------
    def submit(self, job: StepJob, done: Completion) -> None:
        self.connect()  # the first time in the scheduler's thread (ray.init sets signal handlers in the main one)
        with self._cv:
            if self._closed:
                raise RuntimeError("the Ray backend was shut down")
            self._outstanding += 1
            start, self._started = not self._started, True
            self._inbox.append((job, done))
            self._cv.notify()
        if start:
            threading.Thread(target=_DriverLoop(self).run, name="marinbuild-ray-loop", daemon=True).start()

    def shutdown(self, cancel: bool = False) -> None:
        with self._cv:
            self._closed = True
            running = [task.ref for task in self._running.values()] if cancel else []
            if cancel:
                self._cancelled = True
            self._cv.notify()
            idle = self._outstanding == 0
        if idle:
            self._stop()
        for ref in running:
            self._cancel_ref(ref)

    def check_resources(self, resources: Any) -> str | None:
        """A cluster may gain any resource (an autoscaler adds nodes): only a malformed request is refused."""
        try:
            normalize(resources)
        except (TypeError, ValueError) as exc:
            return str(exc)
        return None

    def _complete(
        self, done: Completion, job: StepJob, outcome: JobOutcome | None, error: BaseException | None
    ) -> None:
        """Report a job's end; once the backend is closed and nothing is left, its threads stop."""
        try:
            relay = self._relay
            if relay is not None:
                relay.unwatch(job.output_path)
            done(job, outcome, error)
        finally:
            with self._cv:
                self._outstanding -= 1
                last = self._closed and self._outstanding == 0
            if last:
                self._stop()

    def _stop(self) -> None:
        with self._cv:
            if self._stopping:
                return
            self._stopping = True
            self._cv.notify_all()
            threads = self._lease_threads
            relay, self._relay = self._relay, None
        if relay is not None:
            relay.stop()
        for _ in range(threads):
            self._lease_work.put(None)

    def _to_lease_threads(self, work: Callable[[], None]) -> None:
        """Run ``work`` on a lease thread (started the first time one is needed)."""
        with self._cv:
            start = self._lease_threads == 0
            if start:
                self._lease_threads = self.lease_threads
        if start:
            for i in range(self.lease_threads):
                threading.Thread(target=self._lease_loop, name=f"marinbuild-ray-lease-{i}", daemon=True).start()
        self._lease_work.put(work)

    def _lease_loop(self) -> None:
        while True:
            work = self._lease_work.get()
            if work is None:
                return
            work()

    def _hand_to_loop(self, key: Hashable, item: _Launch | None) -> None:
        """From a lease thread: ``item`` is ready to launch (None: its job ended there, its slot is free)."""
        with self._cv:
            self._prepared.append((key, item))
            self._cv.notify()

    # -- taking the lease and planning the launch ---------------------------------------------------
    def _prepare_here(self, job: StepJob, done: Completion, key: Hashable) -> _Launch | Literal[Attempt.BUSY] | None:
        """One attempt at ``job``'s lease, on the loop's thread: its launch, None if it ended here, or
        ``Attempt.BUSY`` if another runner holds the lease (a lease thread waits for it)."""
        try:
            got = job.try_acquire(start=False)  # the task writes RUNNING and .executor_info
        except BaseException as exc:
            self._complete(done, job, None, exc)
            return None
        if got is Attempt.BUSY:
            return got
        if got is Attempt.BUILT:
            self._complete(done, job, CACHED, None)
            return None
        return self._begin(job, done, key)

    def _prepare_waiting(self, job: StepJob, done: Completion, key: Hashable) -> None:
        """On a lease thread: take ``job``'s lease, waiting for another runner if need be, and hand it to the loop."""
        item = None
        try:
            if job.acquire(start=False):
                item = self._begin(job, done, key)
            else:
                self._complete(done, job, CACHED, None)
        except BaseException as exc:  # any error is this job's outcome
            self._complete(done, job, None, exc)
        self._hand_to_loop(key, item)

    def _begin(self, job: StepJob, done: Completion, key: Hashable) -> _Launch | None:
        """``job`` holds its lease: keep it alive, and pickle what its task needs (None if it ended here)."""
        if self._cancelled:
            job.abandon()
            self._complete(done, job, None, KeyboardInterrupt())
            return None
        try:
            job.begin()
        except BaseException as exc:
            self._complete(done, job, None, job.fail(exc))
            return None
        try:
            return self._launch_of(job, done, key)
        except BaseException as exc:
            self._end_unlaunched(job, done, exc)
            return None

    def _end_unlaunched(self, job: StepJob, done: Completion, exc: BaseException) -> None:
        if isinstance(exc, KeyboardInterrupt) or self._cancelled:
            job.abandon()
            self._complete(done, job, None, exc if isinstance(exc, KeyboardInterrupt) else KeyboardInterrupt())
        else:
            self._complete(done, job, None, job.fail(exc))

    # -- the driver loop: lease, launch, finish ---------------------------------------------------
    def _window(self, active: int) -> int:
        """Tasks of one resource shape the loop keeps launched (the cluster's CPUs are read again when it matters)."""
        if self.launch_window is not None:
            return self.launch_window
        if active >= self._window_size:
            cpus = self._cluster_totals().get("CPU", 0)
            self._window_size = max(MIN_LAUNCH_WINDOW, int(LAUNCH_WINDOW_PER_CPU * cpus))
        return self._window_size

    def _cluster_totals(self) -> dict[str, float]:
        """The cluster's resources (read again at most every ``WINDOW_REFRESH`` seconds: an autoscaler grows it)."""
        now = time.monotonic()
        if now >= self._totals_read + WINDOW_REFRESH:
            import ray

            self._totals_read = now
            try:
                self._totals = {name: float(amount) for name, amount in ray.cluster_resources().items()}
            except Exception:
                logger.debug("could not read the cluster's resources", exc_info=True)
        return self._totals

    def _start(self, item: _Launch) -> bool:
        """Launch ``item``'s task; False if it ended here (launching failed, or the build was cancelled). When the
        task ends, its future's callback (on a thread of Ray's) hands it to the driver loop."""
        try:
            if self._cancelled:
                raise KeyboardInterrupt
            remote = item.shape.remote if item.shape is not None else self._call_remote
            ref = remote.remote(item.payload)
        except BaseException as exc:
            self._end_unlaunched(item.job, item.done, exc)
            return False
        item.ref = ref
        with self._cv:
            cancelled = self._cancelled
            self._running[id(item)] = item
        ref.future().add_done_callback(functools.partial(self._task_ended, item))
        if cancelled:  # Ctrl-C came while launching: its ref ends as cancelled, and finishing says so
            self._cancel_ref(ref)
        return True

    def _task_ended(self, task: _Launch, future: Future[Any]) -> None:
        with self._cv:
            self._ended.append((task, future))
            self._cv.notify()

    def _task_options(self) -> dict[str, Any]:
        return {"max_retries": self.max_retries, "retry_exceptions": False}

    def _shape_key(self, job: StepJob) -> Hashable:
        """What ``job``'s task asks of the cluster: the launch window counts tasks by it."""
        call = job.call
        return self._shape_of(call).key if isinstance(call, StepCall) else "call"

    def _launch_of(self, job: StepJob, done: Completion, key: Hashable) -> _Launch:
        """``job``'s launch, its task's argument pickled here, in one piece (``pickle_payload``): Ray serializes one
        ``bytes`` argument faster than several objects."""
        call = job.call
        run = job.remote_run()
        self._progress_relay(run.holder).watch(job.output_path, job.bus)
        if not isinstance(call, StepCall):
            shipped_code.register_with_ray()
            return _Launch(job, done, key, None, pickle_payload((call, run)))
        payload = pickle_payload((call.config, call.mirror, run))
        return _Launch(job, done, key, self._shape_of(call), payload)

    def _progress_relay(self, holder: str) -> ProgressRelay:
        """The relay of steps' progress reports to their events (``marinbuild.run.ray_progress``), made once."""
        relay = self._relay
        if relay is None:
            with self._shapes_lock:
                if self._relay is None:
                    self._relay = ProgressRelay(holder)
                relay = self._relay
        return relay

    def _shape_of(self, call: StepCall) -> _Shape:
        """The shape and remote of ``call``'s task, worked out once per function, resources and extras."""
        groups = tuple(call.pip_dependency_groups or ())
        key = (id(call.fn), id(call.resources), groups)
        shape = self._shapes.get(key)
        if shape is not None and shape.fn is call.fn and shape.resources is call.resources:
            return shape
        with self._shapes_lock:  # (preparing threads meet here only the first time)
            shape = self._shapes.get(key)
            if shape is None or shape.fn is not call.fn or shape.resources is not call.resources:
                shape = self._shapes[key] = self._new_shape(call)
            return shape

    def _new_shape(self, call: StepCall) -> _Shape:
        shipped_code.register_with_ray()  # a script's own modules go by value (before its function is pickled)
        resources, extras, env_vars = call.request()
        options = self._task_options()
        fresh = False
        if resources is not None:
            options.update(resources.to_ray_options())
            fresh = resources.fresh_worker
        asks = repr(sorted(options.items()))
        runtime_env = step_runtime_env(extras, env_vars, self._pyproject_root)
        if runtime_env is not None:
            options["runtime_env"] = runtime_env
        fn = call.wrapped
        remote = self._remote_for(fn, _declared_options(fn, fresh)).options(**options)  # each launch passes none
        return _Shape(call.fn, call.resources, (id(fn) if is_ray_remote_function(fn) else None, asks), remote)

    def _remote_for(self, fn: Any, declared: dict[str, Any]) -> Any:
        """One Ray remote function per step function: Ray ships it once, then each task only its payload. A
        ``@ray.remote`` function's plain function runs in a task of ours, which also commits, with the options it
        was declared with."""
        key = (fn, declared.get("max_calls") == 1)
        remote = self._remotes.get(key)
        if remote is None:
            import ray

            plain = fn._function if is_ray_remote_function(fn) else fn
            task = task_for(plain, self._relocation)
            remote = ray.remote(**declared)(task) if declared else ray.remote(task)
            self._remotes[key] = remote
        return remote

    @staticmethod
    def _cancel_ref(ref: Any) -> None:
        import ray

        try:
            ray.cancel(ref, force=True)
        except Exception:  # already finished, or the cluster is gone
            logger.debug("could not cancel a task", exc_info=True)

    # -- finishing: release, or record the failure ---------------------------------------------
    def _finish(self, task: _Launch, future: Future[Any]) -> None:
        """``task`` ended (``future`` holds its result): finish its step as its verdict says.

        The verdict is read here, in the loop; a step whose lease needs a request per operation is finished on
        a lease thread."""
        try:
            exc = future.exception()
            verdict = self._verdict(task, exc) if exc is not None else _Verdict("ran", report=future.result())
        except BaseException as exc:  # any error reading the result is the step's outcome
            verdict = _Verdict("failed", exc)
        if task.job.lease.round_trips:
            self._to_lease_threads(functools.partial(self._settle, task, verdict))
        else:
            self._settle(task, verdict)

    def _verdict(self, task: _Launch, exc: BaseException) -> _Verdict:
        """How ``task`` ended, ``exc`` being what ``ray.get`` of its result raises; if its task died, the step's
        status says whether it was committed."""
        from ray import exceptions as rex

        cause = getattr(exc, "cause", None)
        if isinstance(exc, rex.TaskCancelledError) or self._cancelled:
            return _Verdict("cancelled")
        if isinstance(exc, rex.RayTaskError) and isinstance(cause, EngineError):
            error = cause.error  # e.g. the lease was taken over: the task wrote no SUCCESS
            error.__cause__ = RemoteTraceback(_ANSI.sub("", str(exc)).rstrip())
            return _Verdict("engine", error)
        if isinstance(exc, rex.RayTaskError):  # the step's code raised: its task committed nothing
            return _Verdict("raised", _user_error(exc), report=getattr(cause, LAST_REPORT, None))
        if isinstance(
            exc,
            rex.WorkerCrashedError
            | rex.NodeDiedError
            | rex.ObjectLostError
            | rex.OutOfMemoryError
            | rex.LocalRayletDiedError,
        ):
            lost = StepLostError(
                f"its Ray task died {self.max_retries + 1} time(s) "
                f"(max_retries={self.max_retries}): {type(exc).__name__}: {exc}"
            )
            lost.__cause__ = exc
            try:  # it ran if its status says it was committed (SUCCESS), else it was lost
                status = st.read_status(task.job.output_path)
            except Exception:  # the store is unreadable: the step's task failed as far as this driver can tell
                logger.debug("could not read the status of %s", task.job.name, exc_info=True)
                status = None
            return _Verdict("ran") if status == st.STATUS_SUCCESS else _Verdict("lost", lost)
        return _Verdict("failed", exc)  # e.g. the runtime env could not be set up

    def _settle(self, item: _Launch, verdict: _Verdict) -> None:
        """Finish one step as ``verdict`` says: release its lease, or write FAILED; then report it."""
        job = item.job
        error: BaseException | None
        try:
            if verdict.report is not None:
                detail, data = json.loads(verdict.report)
                job.bus.emit(ev.PROGRESS, step=job.name, output_path=job.output_path, detail=detail, data=data)
            if verdict.kind == "cancelled":
                job.abandon()
                outcome, error = None, KeyboardInterrupt(f"{job.name}: cancelled")
            elif verdict.kind == "ran":
                job.release_after_remote(committed=True)  # the task committed the step
                outcome, error = RAN, None
            elif verdict.kind == "engine":
                job.release_after_remote()
                outcome, error = None, verdict.error
            else:  # raised, lost, failed
                assert verdict.error is not None
                outcome, error = None, job.fail(verdict.error)
        except BaseException as exc:  # e.g. the store failed while the lease was given up: this job's outcome
            outcome, error = None, exc
        self._complete(item.done, job, outcome, error)


class _DriverLoop:
    """The driver loop of one ``RayBackend`` (its own thread): lease, launch, finish.

    Each turn takes what other threads handed over (submitted jobs, jobs a lease thread prepared, tasks that ended),
    finishes the ended tasks, and takes leases and launches while each resource shape has room in its launch window;
    then it sleeps until more is handed over. The loop's state is its own: no other thread reads it."""

    def __init__(self, backend: RayBackend) -> None:
        self.backend = backend
        self.pending: dict[Hashable, deque[tuple[StepJob, Completion]]] = {}
        """Per resource shape, submitted jobs waiting for room in its launch window (no lease taken yet)."""
        self.active: Counter[Hashable] = Counter()
        """Per resource shape, its tasks launched, and its jobs holding a lease on their way to a task (being
        prepared on a lease thread, or prepared and not launched yet)."""

    def run(self) -> None:
        """Turn until the backend stops and nothing is left in flight."""
        while (handed := self._take_handed_over()) is not None:
            inbox, prepared, ended = handed
            touched = self._queue(inbox)
            touched |= self._launch_prepared(prepared)
            for task, future in ended:
                self.active[task.key] -= 1
                self.backend._finish(task, future)
                touched.add(task.key)
            if self.backend._cancelled:
                touched.update(self.pending)
            for shape_key in touched:
                self._fill(shape_key)

    def _take_handed_over(self) -> tuple[list[Any], list[tuple[Hashable, _Launch | None]], list[Any]] | None:
        """What other threads handed over since the last turn, (submitted, prepared, ended), waiting while there is
        nothing; None once the backend stops with nothing left."""
        backend = self.backend
        with backend._cv:
            while not (
                backend._inbox
                or backend._prepared
                or backend._ended
                or (backend._stopping and not backend._running)
                or (backend._cancelled and self.pending)
            ):
                backend._cv.wait()
            if backend._stopping and not (backend._inbox or backend._prepared or backend._ended or backend._running):
                return None
            inbox, backend._inbox = backend._inbox, []
            prepared, backend._prepared = backend._prepared, []
            ended, backend._ended = backend._ended, []
            for task, _ in ended:
                backend._running.pop(id(task), None)
        return inbox, prepared, ended

    def _queue(self, inbox: list[tuple[StepJob, Completion]]) -> set[Hashable]:
        """Queue submitted jobs by resource shape; the shapes touched."""
        touched: set[Hashable] = set()
        for job, done in inbox:
            try:
                shape_key = self.backend._shape_key(job)
            except BaseException as exc:  # bad options: nothing was taken or written yet
                self.backend._complete(done, job, None, exc)
                continue
            self.pending.setdefault(shape_key, deque()).append((job, done))
            touched.add(shape_key)
        return touched

    def _launch_prepared(self, prepared: list[tuple[Hashable, _Launch | None]]) -> set[Hashable]:
        """Launch the jobs a lease thread prepared (None: the job ended there); the shapes touched."""
        touched: set[Hashable] = set()
        for shape_key, item in prepared:
            touched.add(shape_key)
            if item is None:
                self.active[shape_key] -= 1
            elif self.backend._cancelled:
                self.active[shape_key] -= 1
                self.backend._end_unlaunched(item.job, item.done, KeyboardInterrupt())
            else:
                self._launch(shape_key, item)
        return touched

    def _fill(self, shape_key: Hashable) -> None:
        """Take leases and launch ``shape_key``'s pending jobs while its window has room."""
        backend = self.backend
        queued = self.pending.get(shape_key)
        while queued and backend._cancelled:  # nothing taken yet: nothing to give up
            job, done = queued.popleft()
            backend._complete(done, job, None, KeyboardInterrupt())
        while queued and self.active[shape_key] < backend._window(self.active[shape_key]):
            job, done = queued.popleft()
            self.active[shape_key] += 1
            item = self._take_lease(job, done, shape_key)
            if item is not None:
                self._launch(shape_key, item)
        if not queued:
            self.pending.pop(shape_key, None)

    def _take_lease(self, job: StepJob, done: Completion, shape_key: Hashable) -> _Launch | None:
        """``job``'s launch if its lease was taken here; None if it ended here or went to a lease thread."""
        backend = self.backend
        # A request per lease operation, or another runner holds it: on a lease thread (which waits for it).
        item = Attempt.BUSY if job.lease.round_trips else backend._prepare_here(job, done, shape_key)
        if item is Attempt.BUSY:
            backend._to_lease_threads(functools.partial(backend._prepare_waiting, job, done, shape_key))
            return None
        if item is None:
            self.active[shape_key] -= 1
        return item

    def _launch(self, shape_key: Hashable, item: _Launch) -> None:
        """Launch ``item`` (prepared, counted in ``active``) in a task of its own."""
        if not self.backend._start(item):
            self.active[shape_key] -= 1


def _declared_options(fn: Any, fresh: bool) -> dict[str, Any]:
    """The options a ``@ray.remote`` function was declared with (``max_calls=1`` added for a fresh worker)."""
    declared: dict[str, Any] = {}
    if is_ray_remote_function(fn):
        declared = {k: v for k, v in (fn._default_options or {}).items() if k != "num_returns"}
    if fresh:
        declared["max_calls"] = 1
    return declared


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _user_error(exc: BaseException) -> BaseException:
    """The exception the step's code raised, with the remote traceback chained as its cause.

    ``ray.get`` raises a ``RayTaskError`` that is also an instance of the step's exception type; its text is the remote
    traceback, its ``cause`` the exception itself. When the worker could not import the step's function, Ray raises a
    ``RuntimeError`` whose first line ends before the reason (the worker's traceback follows): that becomes a
    ``StepImportError`` whose first line ends with the traceback's last line, the import error itself."""
    cause = getattr(exc, "cause", None)
    if not isinstance(cause, BaseException) or cause is exc:
        return exc
    remote = RemoteTraceback(_ANSI.sub("", str(exc)).rstrip())
    message = str(cause)
    if type(cause) is RuntimeError and message.startswith(_RAY_IMPORT_FAILURE):
        reason = next((line.strip() for line in reversed(message.splitlines()) if line.strip()), "")
        head, _, rest = message.partition("\n")
        cause = StepImportError(
            f"the step's function could not be imported on the Ray worker: {reason}\n"
            f"{head.rstrip(':')}.\n{rest.strip()}"
        )
    cause.__cause__ = remote
    return cause


_RAY_IMPORT_FAILURE = "The remote function failed to import on the worker"
"""How Ray's stand-in for a function a worker could not unpickle begins its error (``ray._private.function_manager``).
"""
