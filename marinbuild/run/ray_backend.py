"""The Ray backend: each step's function runs as a Ray task with the resources it asks for.

Who does what. The driver (this process) holds every lease; the task does every other file of the step:
- Driver: takes the step's lease (``job.try_acquire(start=False)``: the lease file, which makes the
  output folder, then a re-read of the status), starts renewing it (``job.begin``: the lease keeper),
  launches the task, and when the task ends stops renewing and releases the lease
  (``job.release_after_remote``); if the step's code raised or its task was lost, it writes FAILED
  under the lease (``job.fail``), as the local backend does.
- Task (``_run_under_lease`` with the step's ``RemoteRun``): writes RUNNING and ``.executor_info``,
  runs ``fn(config)``, then commits as ``StepJob.commit`` does: the outputs' manifest and the
  collision check, a read-only check that the lease file still names the driver (``Lease.check``;
  on GCS it must not write the lease, whose generations are the driver's), then the action record,
  ``.artifact.json`` and SUCCESS. A task whose driver lost the lease writes no SUCCESS. It returns
  nothing: the step's value is in ``.artifact.json``. A retry that finds SUCCESS (its worker died
  after committing) does nothing.
- Why: the driver spent 4-6 ms of CPU per step when it wrote and committed every step itself
  (``bench/ray_bench.py``); each file a step creates costs 0.1-1 ms of kernel time on this VM's ext4,
  and the driver is one process for the whole build while tasks spread over the cluster.

One driver loop (a thread) does the rest of the driver's work for local leases, with no hand-off
between threads: it takes leases and launches while each resource shape has room in its launch
window, ``ray.wait(num_returns=1, fetch_local=False)`` on the launched tasks plus a *bell*, never
by sleeping, and finishes each ended task (``ray.get``, release or FAILED, then the scheduler's
callback, which submits the next steps to the same loop).
- Lease threads (``lease_threads``, started when first needed) take the lease work that waits: a
  lease held by another runner (``job.acquire`` waits for it), and every lease operation on an
  object store (``Lease.round_trips``: a request each, so the leases of a GCS prefix are taken and
  released on these threads, many at once). What they prepare goes back to the loop.
- Measured on ``bench/ray_bench.py``'s fan-out, the designs alternating round by round in one
  process (medians of 6-8 rounds): this single loop against preparing and finishing threads
  handing steps to it, 1.90x against 2.44x plain Ray with the prefix on tmpfs, 2.71x against
  2.78x on this VM's ext4 /tmp (leases taken on threads: 2.97x). One pickled argument per task
  (config, mirror scope, ``RemoteRun``): 0.28-0.32 ms a launch against 0.52 ms for the three as
  arguments; the remote's options are set once per shape (``.options()`` per task: 0.1 ms more).
- The bell: a step submitted from another thread (the first ones, or one a lease thread prepared)
  while the loop waits rings it: a pending call to a small actor (``_BellActor``, one per driver
  process, no CPUs) that returns when rung, so the loop wakes at once (a cheaper bell, cancelling a
  task that waits on a never-ready argument, trips a Ray reference-counting check when that
  argument's actor exits). Steps the loop's own finishing makes ready need no ring: one ring for
  the 1,000-step fan-out, to end the last wait.
- Launch window: ``ray.wait`` costs about 0.45 us per ref it is given, so waiting on every
  launched task is quadratic in a fan-out (0.25 s of CPU for 1,000 steps, 2.5 s for 4,000). The
  loop keeps at most ``launch_window`` jobs of each resource shape holding a lease (launched, or
  being prepared on a lease thread; 4 per CPU of the cluster, at least 64: several times what can
  run); the others wait without a lease (another driver may take one meanwhile). One shape never
  holds up another.
- Failures: a task whose worker process or node died is retried by Ray up to ``max_retries`` times
  (system failures only); an exception raised by the step's own code is never retried: it is the
  step's failure, the original exception with the remote traceback chained as its cause
  (``RemoteTraceback``). A step whose task died more than ``max_retries`` times fails with
  ``StepLostError``. An error of marinbuild's own work in the task (a lease taken over, a damaged
  file, a path-hash collision) comes back as it is (``_EngineError`` carries it), with no FAILED.
- Ctrl-C: ``shutdown(cancel=True)`` cancels every launched task (``ray.cancel``, force), steps not
  launched yet are not launched, and every lease is given up (``job.abandon``).
- Where: ``RayBackend(address)``, else ``RAY_ADDRESS``, connects to that cluster (the workspace is
  shipped as ``working_dir`` when ``working_dir`` is given and this is not already a submitted job);
  with neither, a local Ray instance is started in this process, bound to 127.0.0.1, with no
  dashboard, no token file and warnings only. ``ray`` is imported when the first step is
  submitted, so a no-op build never starts Ray. A local prefix must be on a file system every node
  shares: a task that cannot see the output folder its driver made says so
  (``OutputFolderMissingError``).

Steps: a ``StepCall`` (what the executor makes) tells the function, config and request
(``ExecutorStep.resources``, a ``remote(...)`` wrapper, or a ``@ray.remote`` function's
own options: its plain function runs in the backend's task, declared with those options).
A BUILD target's function, ``run_target``, and its ``TargetConfig`` pickle as they are; when
the workspace was shipped and its driver path does not exist on the worker, paths under it in
the config are moved to the task's working directory.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import logging
import os
import pickle
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
from marinbuild.run.step_job import CACHED, RAN, RemoteRun, StepJob

logger = logging.getLogger("marinbuild")

DEFAULT_MAX_RETRIES = 3
MIN_LAUNCH_WINDOW = 64
LAUNCH_WINDOW_PER_CPU = 4
"""Jobs of one resource shape holding a lease at once: 4 per CPU of the cluster, at least 64 (``launch_window``)."""
WINDOW_REFRESH = 60.0
"""Seconds between reads of the cluster's CPUs (an autoscaler grows it), and only while a shape is at its window."""
LEASE_THREADS = 8
"""Threads for lease work that waits: a lease held by another runner, and leases on an object store (a request
per operation). Started the first time one is needed; local leases are taken and released on the loop's thread."""


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


@dataclass(frozen=True)
class _Shape:
    """What the tasks of one step function, resources and extras ask for, and their remote (options applied)."""

    fn: Any
    resources: Any
    """``fn`` and ``resources`` are kept: the cache is keyed on their ids."""
    key: Hashable
    """What the launch window counts tasks by: what they ask of the cluster."""
    remote: Any


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


class _EngineError(Exception):
    """Raised by a step's task when marinbuild's own work there failed (RUNNING and ``.executor_info``, or
    the commit), not the step's code: the driver reports ``error`` as it is, and writes no FAILED."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt without calling the error's __init__, whose signature need not match its args.
        error = self.error
        return _rebuild_engine_error, (type(error), error.args, dict(getattr(error, "__dict__", {})))


def _rebuild_engine_error(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> _EngineError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return _EngineError(error)


def _run_under_lease(run: RemoteRun, step: Callable[[], Any]) -> None:
    """The body of every step's task: RUNNING and ``.executor_info``, the step, then its commit.

    The step's own exception propagates (the step's failure); marinbuild's raise ``_EngineError``.
    Returns nothing: the step's value is in ``.artifact.json``.
    """
    try:
        if not run.start():
            return  # an earlier attempt committed it, then its worker died before replying
    except Exception as exc:
        raise _EngineError(exc) from exc
    result = step()
    try:
        run.commit(result)
    except Exception as exc:
        raise _EngineError(exc) from exc


def _run_step(fn: Callable[[Any], Any], config: Any, relocation: _Relocation | None,
              mirror: MirrorScope | None = None) -> Any:
    """In a step's task: the step's function on its config, in the step's ``mirror://`` scope (its own budget)."""
    if relocation is not None and not os.path.exists(relocation.root):
        config = relocate_paths(config, relocation.root, os.getcwd())
    return (mirror or MirrorScope()).run(fn, config)


_PAYLOAD_PICKLER: Any = None
_SHIPPED_CLASSES: dict[str, type] = {}
"""In a worker: the classes of the driver's ``__main__`` met in payloads so far, by the sha256 of their pickle."""


def pickle_payload(value: Any, classes: dict[type, tuple[str, bytes]]) -> bytes:
    """``value`` pickled for a step's task, each class of the driver's ``__main__`` pickled once.

    cloudpickle pickles a class of ``__main__`` (a config dataclass defined in the build's script)
    by value, every time: 0.47 ms and 5 KB for a small dataclass, then 0.18 ms to rebuild it in the
    worker. Here it is pickled once into ``classes`` (``class -> (sha256, pickle)``) and each payload
    carries those bytes as a persistent id, which a worker turns into the class once.
    """
    global _PAYLOAD_PICKLER
    if _PAYLOAD_PICKLER is None:
        from ray import cloudpickle

        class PayloadPickler(cloudpickle.Pickler):
            def __init__(self, file: io.BytesIO, shipped: dict[type, tuple[str, bytes]]) -> None:
                super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
                self.shipped = shipped

            def persistent_id(self, obj: Any) -> tuple[str, bytes] | None:
                if not isinstance(obj, type) or obj.__module__ != "__main__":
                    return None
                entry = self.shipped.get(obj)
                if entry is None:
                    data = cloudpickle.dumps(obj)
                    entry = self.shipped[obj] = (hashlib.sha256(data).hexdigest(), data)
                return entry

        _PAYLOAD_PICKLER = PayloadPickler
    out = io.BytesIO()
    _PAYLOAD_PICKLER(out, classes).dump(value)
    return out.getvalue()


class _PayloadUnpickler(pickle.Unpickler):
    def persistent_load(self, pid: Any) -> type:
        key, data = pid
        cls = _SHIPPED_CLASSES.get(key)
        if cls is None:
            cls = _SHIPPED_CLASSES[key] = pickle.loads(data)
        return cls


def unpickle_payload(data: bytes) -> Any:
    """In a step's task: what ``pickle_payload`` pickled (each shipped class rebuilt once per worker)."""
    return _PayloadUnpickler(io.BytesIO(data)).load()


def _task_for(fn: Callable[[Any], Any], relocation: _Relocation | None) -> Callable[[bytes], None]:
    """The Ray task of the steps whose function is ``fn`` (both shipped once, with the task's definition).

    Its argument is the ``(config, mirror scope, RemoteRun)`` of one step (``pickle_payload``).
    """

    def step(payload: bytes) -> None:
        config, mirror, run = unpickle_payload(payload)
        _run_under_lease(run, lambda: _run_step(fn, config, relocation, mirror))

    step.__name__ = getattr(fn, "__name__", "step")  # (its qualname stays "...<locals>...": pickled by value)
    return step


def _run_call(payload: bytes) -> None:
    """The Ray task for a job whose call is not a ``StepCall`` (any picklable callable): the pickled (call, run)."""
    call, run = unpickle_payload(payload)
    _run_under_lease(run, call)


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
    lease_threads: int = LEASE_THREADS
    """Threads for lease work that waits (another runner's lease; leases on GCS, a request each)."""
    launch_window: int | None = None
    """Jobs of one resource shape holding a lease (launched and not yet ended, or being prepared), at most; more
    wait in the driver, without a lease, until one ends. It bounds what each ``ray.wait`` looks at. None: 4 per
    CPU of the cluster, at least 64."""
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
        self._shipped: dict[type, tuple[str, bytes]] = {}
        """Classes of this process's ``__main__`` in task payloads, each pickled once (``pickle_payload``)."""
        self._call_remote: Any = None
        self._relocation: _Relocation | None = None
        self._pyproject_root: Path | None = None
        self._cv = threading.Condition(self._lock)
        self._inbox: list[tuple[StepJob, Completion]] = []
        """Submitted jobs, for the driver loop (guarded by ``_cv``, as everything the loop shares)."""
        self._prepared: list[tuple[Hashable, _Launch | None]] = []
        """Jobs whose lease a lease thread took, ready to launch (None: the job ended there)."""
        self._lease_work: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lease_threads = 0
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

            self._call_remote = ray.remote(_run_call).options(**self._task_options())
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
            self._inbox.append((job, done))
            bell = self._take_bell()  # (None when the loop itself submits: a step it finished freed another)
            self._cv.notify()
        if start:
            threading.Thread(target=self._loop, name="marinbuild-ray-loop", daemon=True).start()
        if bell is not None:
            bell.ring()

    def shutdown(self, cancel: bool = False) -> None:
        with self._cv:
            self._closed = True
            running = [task.ref for task in self._running.values()] if cancel else []
            if cancel:
                self._cancelled = True
            bell = self._take_bell() if cancel else None  # the loop collects the cancelled tasks
            self._cv.notify()
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
            if self._stopping:
                return
            self._stopping = True
            self._cv.notify_all()
            threads = self._lease_threads
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

    def _hand_to_loop(self, shape: Hashable, item: _Launch | None) -> None:
        """From a lease thread: ``item`` is ready to launch (None: its job ended there, its slot is free)."""
        with self._cv:
            self._prepared.append((shape, item))
            bell = self._take_bell()
            self._cv.notify()
        if bell is not None:
            bell.ring()

    # -- taking the lease and planning the launch ---------------------------------------------------
    def _prepare_here(self, job: StepJob, done: Completion, shape: Hashable) -> _Launch | None | bool:
        """One attempt at ``job``'s lease, on the loop's thread: its launch, None if it ended here, or False if
        another runner holds the lease (a lease thread waits for it)."""
        try:
            got = job.try_acquire(start=False)  # the task writes RUNNING and .executor_info
        except BaseException as exc:
            self._complete(done, job, None, exc)
            return None
        if got is None:
            return False
        if not got:
            self._complete(done, job, CACHED, None)
            return None
        return self._begin(job, done, shape)

    def _prepare_waiting(self, job: StepJob, done: Completion, shape: Hashable) -> None:
        """On a lease thread: take ``job``'s lease, waiting for another runner if need be, and hand it to the loop."""
        item = None
        try:
            if job.acquire(start=False):
                item = self._begin(job, done, shape)
            else:
                self._complete(done, job, CACHED, None)
        except BaseException as exc:  # any error is this job's outcome
            self._complete(done, job, None, exc)
        self._hand_to_loop(shape, item)

    def _begin(self, job: StepJob, done: Completion, shape: Hashable) -> _Launch | None:
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
            submit = self._launcher(job)
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

    # -- the driver loop: lease, launch, ray.wait, finish -----------------------------------------
    def _take_bell(self) -> _Bell | None:
        """The bell to ring to wake the loop out of ``ray.wait`` (None: it is not waiting, or was rung already)."""
        bell, self._bell = self._bell, None
        return bell

    def _loop(self) -> None:
        """Take leases and launch while each shape has room; ``ray.wait`` on the running tasks (and a bell); finish."""
        import ray

        in_flight: dict[Any, _Task] = {}
        pending: dict[Hashable, deque[tuple[StepJob, Completion]]] = {}
        """Per resource shape, submitted jobs waiting for room in its launch window (no lease taken yet)."""
        active: Counter[Hashable] = Counter()
        """Per resource shape, jobs holding their lease: launched, or being prepared on a lease thread."""
        key = uuid.uuid4().hex
        bell: _Bell | None = None
        actor: Any = None
        seen = 0
        """Rings of this loop's bell in ``actor`` so far."""

        def launch(item: _Launch) -> None:
            task = self._start(item)
            if task is None:
                active[item.shape] -= 1
            else:
                in_flight[task.ref] = task

        def fill(shape: Hashable) -> None:
            """Take leases and launch ``shape``'s pending jobs while its window has room."""
            queued = pending.get(shape)
            while queued and self._cancelled:  # nothing taken yet: nothing to give up
                job, done = queued.popleft()
                self._complete(done, job, None, KeyboardInterrupt())
            while queued and active[shape] < self._window(active[shape]):
                job, done = queued.popleft()
                active[shape] += 1
                if job.lease.round_trips:  # a request per lease operation: on a lease thread
                    self._to_lease_threads(lambda j=job, d=done, s=shape: self._prepare_waiting(j, d, s))
                    continue
                item = self._prepare_here(job, done, shape)
                if item is False:  # another runner holds it: wait on a lease thread
                    self._to_lease_threads(lambda j=job, d=done, s=shape: self._prepare_waiting(j, d, s))
                elif item is None:
                    active[shape] -= 1
                else:
                    launch(item)
            if not queued:
                pending.pop(shape, None)

        while True:
            with self._cv:
                while not (self._inbox or self._prepared or in_flight or self._stopping
                           or (self._cancelled and pending)):
                    self._cv.wait()
                if self._stopping and not (self._inbox or self._prepared or in_flight):
                    if bell is not None:  # end its wait in the actor
                        bell.ring()
                    return
                inbox, self._inbox = self._inbox, []
                prepared, self._prepared = self._prepared, []
            touched: set[Hashable] = set()
            for job, done in inbox:
                try:
                    shape = self._shape_key(job)
                except BaseException as exc:  # bad options: nothing was taken or written yet
                    self._complete(done, job, None, exc)
                    continue
                pending.setdefault(shape, deque()).append((job, done))
                touched.add(shape)
            for shape, item in prepared:
                touched.add(shape)
                if item is None:
                    active[shape] -= 1
                elif self._cancelled:
                    active[shape] -= 1
                    self._end_unlaunched(item.job, item.done, KeyboardInterrupt())
                else:
                    launch(item)
            if self._cancelled:
                touched.update(pending)
            for shape in touched:
                fill(shape)
            if not in_flight:
                continue
            try:
                if bell is None:
                    bell, seen = _BELLS.new(key, seen, actor)
                    actor = bell.actor
                with self._cv:  # armed in the same breath as the check: what is handed over after it rings
                    if self._inbox or self._prepared:
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
                    active[task.shape] -= 1
                    if task.job.lease.round_trips:
                        self._to_lease_threads(lambda t=task: self._finish(t))
                    else:
                        self._finish(task)
                    fill(task.shape)
                elif bell is not None and ref == bell.ref:  # ready unrung: only if its actor died
                    logger.warning("the Ray backend's bell actor died; starting another")
                    _BELLS.lose(bell.actor)
                    bell = None

    def _window(self, active: int) -> int:
        """Tasks of one resource shape the loop keeps launched (the cluster's CPUs are read again when it matters)."""
        if self.launch_window is not None:
            return self.launch_window
        now = time.monotonic()
        if active >= self._window_size and now >= self._window_checked + WINDOW_REFRESH:
            import ray

            self._window_checked = now
            try:
                cpus = float(ray.cluster_resources().get("CPU", 0))
            except Exception:
                logger.debug("could not read the cluster's resources", exc_info=True)
            else:
                self._window_size = max(MIN_LAUNCH_WINDOW, int(LAUNCH_WINDOW_PER_CPU * cpus))
        return self._window_size

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
        if cancelled:  # Ctrl-C came while launching: its ref ends as cancelled, and finishing says so
            self._cancel_ref(ref)
        return task

    def _task_options(self) -> dict[str, Any]:
        return {"max_retries": self.max_retries, "retry_exceptions": False}

    def _shape_key(self, job: StepJob) -> Hashable:
        """What ``job``'s task asks of the cluster: the launch window counts tasks by it."""
        call = job.call
        return self._shape_of(call).key if isinstance(call, StepCall) else "call"

    def _launcher(self, job: StepJob) -> Callable[[], Any]:
        """What launches ``job``'s task.

        The task's arguments are pickled here, in one piece (``pickle_payload``): Ray serializes one
        ``bytes`` argument faster than several objects (0.28-0.32 ms a launch against 0.52 ms for three).
        """
        call = job.call
        run = job.remote_run()
        if not isinstance(call, StepCall):
            remote = self._call_remote
            payload = pickle_payload((call, run), self._shipped)
            return lambda: remote.remote(payload)
        remote = self._shape_of(call).remote
        payload = pickle_payload((call.config, call.mirror, run), self._shipped)
        return lambda: remote.remote(payload)

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
        from marinbuild.runtime_env import step_runtime_env

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
        remote = self._remote_for(fn, fresh).options(**options)  # each launch then passes no options
        return _Shape(call.fn, call.resources, (id(fn) if is_ray_remote_function(fn) else None, asks), remote)

    def _remote_for(self, fn: Any, fresh: bool) -> Any:
        """One Ray remote function per step function: Ray ships it once, then each task only its config.

        A ``@ray.remote`` function's plain function runs in a task of ours (which also commits), with the
        options it was declared with.
        """
        key = (fn, fresh)
        remote = self._remotes.get(key)
        if remote is None:
            import ray

            declared: dict[str, Any] = {}
            if is_ray_remote_function(fn):
                declared = {k: v for k, v in (fn._default_options or {}).items() if k != "num_returns"}
                fn = fn._function
            if fresh:
                declared["max_calls"] = 1
            task = _task_for(fn, self._relocation)
            remote = ray.remote(**declared)(task) if declared else ray.remote(task)
            self._remotes[key] = remote
        return remote

    @staticmethod
    def _cancel_ref(ref: Any) -> None:
        import ray

        try:
            ray.cancel(ref, force=True)
        except Exception:
            logger.debug("could not cancel a task", exc_info=True)

    # -- finishing: release, or record the failure ---------------------------------------------
    def _finish(self, task: _Task) -> None:
        """The task ended: it committed the step (or raised); release the lease, or record the failure."""
        with self._cv:
            self._running.pop(id(task), None)
        try:
            outcome, error = self._settle(task)
        except BaseException as exc:  # e.g. the store failed while the lease was given up: this job's outcome
            outcome, error = None, exc
        self._complete(task.done, task.job, outcome, error)

    def _settle(self, task: _Task) -> tuple[str | None, BaseException | None]:
        """Give up ``task``'s lease as its end requires; its job's outcome and error."""
        import ray
        from ray import exceptions as rex

        job = task.job
        try:
            ray.get(task.ref)
        except BaseException as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(exc, rex.TaskCancelledError | KeyboardInterrupt) or self._cancelled:
                job.abandon()
                return None, KeyboardInterrupt(f"{job.name}: cancelled")
            if isinstance(exc, rex.RayTaskError) and isinstance(cause, _EngineError):
                error = cause.error  # e.g. the lease was taken over: the task wrote no SUCCESS
                error.__cause__ = RemoteTraceback(_ANSI.sub("", str(exc)).rstrip())
                job.release_after_remote()
                return None, error
            if isinstance(exc, rex.RayTaskError):
                return None, job.fail(_user_error(exc))
            if isinstance(exc, rex.WorkerCrashedError | rex.NodeDiedError | rex.ObjectLostError
                          | rex.OutOfMemoryError | rex.LocalRayletDiedError):
                lost = StepLostError(f"its Ray task died {self.max_retries + 1} time(s) "
                                     f"(max_retries={self.max_retries}): {type(exc).__name__}: {exc}")
                lost.__cause__ = exc
                return None, job.fail(lost)
            return None, job.fail(exc)  # e.g. the runtime env could not be set up
        job.release_after_remote()  # the task committed the step
        return RAN, None


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
