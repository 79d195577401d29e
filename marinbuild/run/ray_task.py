"""What runs inside a step's Ray task (imported by Ray workers): the task bodies and what they send back.

- ``task_for(fn)``: the task of one step of ``fn``: RUNNING and ``.executor_info``, the step, its
  commit (``RemoteRun``).
- ``run_call``: the task of a job whose call is any picklable callable.
- The payload of a task, one ``bytes`` per step (``pickle_payload``); ``relocate_paths`` moves workspace
  paths in a config when the workspace was shipped to the cluster.
- ``EngineError`` carries an error of marinbuild's own work in the task (not the step's code).
- A step's progress reports (``marinbuild.run.step_progress``) go to the driver's relay
  (``marinbuild.run.ray_progress``), which emits them as ``progress`` events.
- A step's own exception gets a note naming the worker's log files (``note_worker_log``): it prints
  with the traceback, which the driver keeps in the step's ``.marinbuild_traceback.txt``."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import pickle
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marinbuild.run import step_progress
from marinbuild.run.failure import WORKER_LOG_NOTE
from marinbuild.run.ray_progress import TaskReporter
from marinbuild.run.step_call import MirrorScope
from marinbuild.run.step_job import RemoteRun


@dataclass
class Relocation:
    """Paths under ``root`` on the driver move to the task's working directory if ``root`` is missing there."""

    root: str


class EngineError(Exception):
    """Raised by a step's task when marinbuild's own work there failed (RUNNING and ``.executor_info``, or
    the commit), not the step's code: the driver reports ``error`` as it is, and writes no FAILED."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt without calling the error's __init__, whose signature need not match its args.
        return _rebuild_engine_error, (type(e := self.error), e.args, dict(getattr(e, "__dict__", {})))


def _rebuild_engine_error(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> EngineError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return EngineError(error)


LAST_REPORT = "marinbuild_last_report"  # the attribute of a step's exception: its last progress report, for the driver


def run_under_lease(run: RemoteRun, step: Callable[[], Any]) -> str | None:
    """The body of every step's task: RUNNING and ``.executor_info``, the step, then its commit.

    The step's own exception propagates (the step's failure); marinbuild's raise ``EngineError``.
    Returns the step's last progress report, if it made one (``TaskReporter``), as JSON
    text (the driver reads it whatever classes its values are); a step that raises carries it as its exception's
    ``LAST_REPORT`` attribute. The step's value is in ``.artifact.json``."""
    try:
        if not run.start():
            return None  # an earlier attempt committed it, then its worker died before replying
    except Exception as exc:
        raise EngineError(exc) from exc
    reporter = TaskReporter(run.holder, run.action.name, run.output_path)
    try:
        with step_progress.reporting(reporter):
            result = step()
    except Exception as exc:
        note_worker_log(exc)
        if reporter.last is not None:  # the driver emits it, as it does a committed step's
            with contextlib.suppress(AttributeError):
                setattr(exc, LAST_REPORT, json.dumps(reporter.last, default=str))
        raise
    try:
        run.commit(result)
    except Exception as exc:
        raise EngineError(exc) from exc
    return None if reporter.last is None else json.dumps(reporter.last, default=str)


def worker_log() -> str:
    """This Ray worker's log files, as ``note_worker_log`` names them: the node, the files' path in the
    node's session logs folder (``<temp dir>/<session>/logs/worker-<worker id>-<job id>-<pid>.out`` and
    ``.err``), and the ``ray logs`` command that prints them from any machine that reaches the cluster."""
    import glob

    import ray

    context = ray.get_runtime_context()
    worker_id, node_id, pid = context.get_worker_id(), context.get_node_id(), os.getpid()
    logs = os.path.join(context.get_temp_dir(), context.get_session_name(), "logs")
    found = sorted(glob.glob(os.path.join(logs, f"worker-{worker_id}-*-{pid}.out")))
    out = found[0] if found else os.path.join(logs, f"worker-{worker_id}-*-{pid}.out")
    return (
        f"{out} (and .err) on node {ray.util.get_node_ip_address()} ({node_id}); "
        f"`ray logs worker --pid {pid} --node-id {node_id}` (add --err for stderr)"
    )


def note_worker_log(exc: BaseException) -> None:
    """Name this worker's log on the step's exception (a note: it prints with the traceback, travels with the
    exception to the driver, and ``marinbuild.run.failure.worker_log_of`` finds it)."""
    with contextlib.suppress(Exception):  # not in a Ray worker, or Ray's context cannot say: the traceback is enough
        exc.add_note(WORKER_LOG_NOTE + worker_log())


def run_step(
    fn: Callable[[Any], Any], config: Any, relocation: Relocation | None, mirror: MirrorScope | None = None
) -> Any:
    """In a step's task: the step's function on its config, in the step's ``mirror://`` scope (its own budget)."""
    if relocation is not None and not os.path.exists(relocation.root):
        config = relocate_paths(config, relocation.root, os.getcwd())
    return (mirror or MirrorScope()).run(fn, config)


def pickle_payload(value: Any) -> bytes:
    """``value`` pickled for a step's task (cloudpickle: classes of ``__main__`` and of modules shipped by value,
    ``marinbuild.run.shipped_code``, go with their code). Each class is pickled once per process, its bytes copied
    into each payload (``load_payload``): pickling a script's dataclass anew cost 0.3 ms a task, and cloudpickle's
    look-up of an importable class several microseconds each time."""
    from ray.cloudpickle import cloudpickle  # lazy: ray (called on the driver once Ray is connected)

    def class_bytes(obj: Any) -> bytes | None:
        if not isinstance(obj, type):
            return None
        return _class_bytes.get(obj) or _class_bytes.setdefault(obj, cloudpickle.dumps(obj, pickle.HIGHEST_PROTOCOL))

    pickler = cloudpickle.Pickler(out := io.BytesIO(), pickle.HIGHEST_PROTOCOL)
    pickler.persistent_id = class_bytes  # type: ignore[method-assign]
    pickler.dump(value)
    return out.getvalue()


def load_payload(payload: bytes) -> Any:
    """A ``pickle_payload``'s value, each of its classes loaded once per process."""
    unpickler = pickle.Unpickler(io.BytesIO(payload))
    load = lambda pid: _classes.get(pid) or _classes.setdefault(pid, pickle.loads(pid))  # noqa: E731
    unpickler.persistent_load = load  # type: ignore[method-assign]
    return unpickler.load()


_class_bytes: weakref.WeakKeyDictionary[type, bytes] = weakref.WeakKeyDictionary()  # (a redefined class: the old goes)
_classes: dict[bytes, Any] = {}


def task_for(fn: Callable[[Any], Any], relocation: Relocation | None) -> Callable[[bytes], Any]:
    """The Ray task of one step whose function is ``fn`` (both shipped once, with the task's definition); its
    argument is the step's ``(config, mirror scope, RemoteRun)`` (``pickle_payload``)."""

    def step(payload: bytes) -> str | None:
        config, mirror, run = load_payload(payload)
        return run_under_lease(run, lambda: run_step(fn, config, relocation, mirror))

    step.__name__ = getattr(fn, "__name__", "step")  # (its qualname stays "...<locals>...": pickled by value)
    return step


def run_call(payload: bytes) -> str | None:
    """The Ray task for a job whose call is not a ``StepCall`` (any picklable callable): the pickled (call, run)."""
    call, run = load_payload(payload)
    return run_under_lease(run, call)


def relocate_paths(value: Any, old_root: str, new_root: str) -> Any:
    """``value`` with every string path at or under ``old_root`` moved under ``new_root``."""
    old = old_root.rstrip("/")

    def move(v: Any) -> Any:
        if isinstance(v, str):
            if v == old or v.startswith(old + "/"):
                return new_root + v[len(old) :]
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
