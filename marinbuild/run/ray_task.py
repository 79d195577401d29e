"""What runs inside a step's Ray task (imported by Ray workers): the task bodies and what they send back.

- ``task_for(fn)``: the task of one step of ``fn``: RUNNING and ``.executor_info``, the step, its
  commit (``RemoteRun``).
- ``run_call``: the task of a job whose call is any picklable callable.
- The payload of a task, one ``bytes`` per step (``pickle_payload``), with each class of the
  driver's ``__main__`` pickled once; ``relocate_paths`` moves workspace paths in a config when the
  workspace was shipped to the cluster.
- ``EngineError`` carries an error of marinbuild's own work in the task (not the step's code).
- A step's progress reports (``marinbuild.run.step_progress``) go to the driver's relay
  (``marinbuild.run.ray_progress``), which emits them as ``progress`` events.
- A step's own exception gets a note naming the worker's log files (``note_worker_log``): it prints
  with the traceback, which the driver keeps in the step's ``.marinbuild_traceback.txt``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marinbuild.run import step_progress
from marinbuild.run.failure import WORKER_LOG_NOTE
from marinbuild.run.ray_progress import task_reporter
from marinbuild.run.shipped_code import is_shipped
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
        error = self.error
        return _rebuild_engine_error, (type(error), error.args, dict(getattr(error, "__dict__", {})))


def _rebuild_engine_error(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> EngineError:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return EngineError(error)


def run_under_lease(run: RemoteRun, step: Callable[[], Any]) -> None:
    """The body of every step's task: RUNNING and ``.executor_info``, the step, then its commit.

    The step's own exception propagates (the step's failure); marinbuild's raise ``EngineError``.
    Returns nothing: the step's value is in ``.artifact.json``.
    """
    try:
        if not run.start():
            return  # an earlier attempt committed it, then its worker died before replying
    except Exception as exc:
        raise EngineError(exc) from exc
    try:
        with step_progress.reporting(task_reporter(run.holder, run.action.name, run.output_path)):
            result = step()
    except Exception as exc:
        note_worker_log(exc)
        raise
    try:
        run.commit(result)
    except Exception as exc:
        raise EngineError(exc) from exc


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
    try:
        exc.add_note(WORKER_LOG_NOTE + worker_log())
    except Exception:  # not in a Ray worker, or Ray's context cannot say: the traceback is enough
        pass


def run_step(
    fn: Callable[[Any], Any], config: Any, relocation: Relocation | None, mirror: MirrorScope | None = None
) -> Any:
    """In a step's task: the step's function on its config, in the step's ``mirror://`` scope (its own budget)."""
    if relocation is not None and not os.path.exists(relocation.root):
        config = relocate_paths(config, relocation.root, os.getcwd())
    return (mirror or MirrorScope()).run(fn, config)


_PAYLOAD_PICKLER: Any = None
_SHIPPED_CLASSES: dict[str, type] = {}
"""In a worker: the classes of the driver's ``__main__`` met in payloads so far, by the sha256 of their pickle."""


def pickle_payload(value: Any, classes: dict[type, tuple[str, bytes]]) -> bytes:
    """``value`` pickled for a step's task, each class of the driver's ``__main__`` (or of another module shipped by
    value: ``marinbuild.run.shipped_code``) pickled once.

    cloudpickle pickles a class of ``__main__`` (a config dataclass defined in the build's script)
    by value, every time, and the worker rebuilds it every time. Here it is pickled once into
    ``classes`` (``class -> (sha256, pickle)``) and each payload
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
                if not isinstance(obj, type) or not is_shipped(obj.__module__):
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


def task_for(fn: Callable[[Any], Any], relocation: Relocation | None) -> Callable[[bytes], None]:
    """The Ray task of one step whose function is ``fn`` (both shipped once, with the task's definition).

    Its argument is the ``(config, mirror scope, RemoteRun)`` of the step (``pickle_payload``).
    """

    def step(payload: bytes) -> None:
        config, mirror, run = unpickle_payload(payload)
        run_under_lease(run, lambda: run_step(fn, config, relocation, mirror))

    step.__name__ = getattr(fn, "__name__", "step")  # (its qualname stays "...<locals>...": pickled by value)
    return step


def run_call(payload: bytes) -> None:
    """The Ray task for a job whose call is not a ``StepCall`` (any picklable callable): the pickled (call, run)."""
    call, run = unpickle_payload(payload)
    run_under_lease(run, call)


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
