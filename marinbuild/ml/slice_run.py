"""A levanter job on a multi-host TPU slice: one process per host, all together, restarted whole on a loss.

The job is a ``SliceJob``: the child module every host runs (``TRAIN``: ``marinbuild.ml.train``
for ``train_lm``; ``EVAL_HARNESS``: ``marinbuild.ml.eval_harness`` for ``eval_harness``). Both
are JAX programs that run as one JAX distributed job across the slice's hosts, so they are
started the same way. ``run_on_tpu_slice`` runs in the step's own Ray task, which is the slice's
coordinator (it holds no TPU itself; ``marinbuild.core.resources`` asks nothing of the slice for
it). Each attempt:

1. reserves one whole slice with Ray's ``ray.util.tpu.slice_placement_group``: a placement
   group on the ``TPU-<type>-head`` resource of some slice's worker 0 (Ray's
   ``reserve_tpu_slice``), then one bundle of the host's ``TPU`` chips on every host carrying
   that slice's ``ray.io/tpu-slice-name`` label, all scheduled together. It waits at most
   ``SlicePolicy.slice_wait`` seconds for both; past that the step fails with
   ``SliceUnavailableError``: one line saying what was asked and which TPU slices the
   cluster has;
2. starts the job's process on every host of it with ``ray.util.tpu.run_on_slice``
   (one Ray task per host, ``max_calls=1``, never retried by Ray on its own). The task reads
   its TPU worker id from its node's ``ray.io/tpu-worker-id`` label and runs the job's module
   as a child process (``marinbuild.ml.process``, its log in the step's
   ``logs/<job name>-host<id>.log``: ``train-host0.log``, ``eval-host0.log``). On real TPU
   VMs JAX finds the coordinator, process count and index itself; on hosts without TPU chips
   they are given explicitly (worker 0's address and a free port there, the slice's host
   count, the worker id) and the collectives run on CPU (gloo);
3. waits for every host. When one ends with an error, the others get ``LOSS_GRACE``
   seconds to end on their own (a lost peer usually ends them too), then are cancelled
   (``ray.cancel(force=True)``, which kills their worker and, with it, the job's child);
   the placement groups are removed (``SlicePlacementGroup.shutdown``) after every attempt.

What ended an attempt decides the next one, as Marin's fray (``run_on_pod``) does it:
- **preemption**: a node or worker lost (``NodeDiedError``, ``WorkerCrashedError``,
  ``ActorDiedError``, ...) or a host's process killed by a signal (a preempted VM's
  SIGTERM, a SIGKILL): counted against ``preemption_retries``;
- **failure**: a host's process that exited with an error code (the code's own error,
  such as a bad configuration found at run time): counted against ``failure_retries``.
A preemption found among an attempt's errors makes it a preemption. Within budget the slice
is reserved again and the job starts again: training resumes from the latest checkpoint in the
step's output folder (``marinbuild.ml.train``), an evaluation starts over (it keeps no partial
state); past a budget the step fails with ``SliceRunError``, its
message naming the cause and the failing host's log. Every attempt's start and end is a line
in ``logs/slice.log``.

The step's lease stays with the build's driver the whole time (the step's task runs until
the last attempt ends) and the status is written by the step's task, once, after the slice
finished: SUCCESS once, never per host. The step's result is process 0's summary: levanter's
evaluation harness runs lm-eval on process 0 alone (the others serve its batches in
``worker_message_loop``) and returns the outputs there only, so process 0 alone writes the
results; likewise process 0 alone writes training's records.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from marinbuild.core.resources import TpuSlice
from marinbuild.ml.process import MlProcessError, is_local, run_child, say
from marinbuild.run.resources import local_tpu_chips

LOSS_GRACE = 20.0
"""Seconds the other hosts of a slice get to end on their own after one host's process ended with an error."""
CANCEL_WAIT = 120.0
"""Seconds to wait for cancelled host tasks to end before the slice's placement group is removed anyway."""
SLICE_LOG = "slice.log"

PREEMPTED = "preempted"
FAILED = "failed"
CANCELLED = "cancelled"


@dataclass(frozen=True)
class SlicePolicy:
    """How long to wait for a slice, and how many times to start over after a preemption or a failure."""

    slice_wait: float = 1800.0
    """Seconds to wait for a free slice (head reservation and every host's bundle) before failing."""
    preemption_retries: int = 100
    """Restarts after a preemption (a host lost, or its process killed by a signal)."""
    failure_retries: int = 2
    """Restarts after a failure of the job's code (a process that exited with an error)."""


@dataclass(frozen=True)
class SliceJob:
    """What runs on every host of a slice, and how messages name it."""

    module: str
    """The child module each host runs (``python -m module``, ``marinbuild.ml.process``)."""
    name: str
    """Its log's name: ``logs/<name>-host<worker id>.log``."""
    rule: str
    """The rule whose attributes (``slice_wait``, the retry budgets) messages point at."""
    work: str
    """What the job does, in messages ("training")."""
    again: str
    """What a restart does, in messages."""


TRAIN = SliceJob("marinbuild.ml.train", "train", "train_lm", "training", "resuming from the latest checkpoint")
EVAL_HARNESS = SliceJob(
    "marinbuild.ml.eval_harness", "eval", "eval_harness", "evaluation", "evaluating again from the start"
)


class SliceUnavailableError(RuntimeError):
    """No slice of the asked type could be reserved within ``SlicePolicy.slice_wait`` seconds."""


class SliceRunError(RuntimeError):
    """The job on the slice was preempted or failed more often than its budget allows."""


def run_on_tpu_slice(
    job: SliceJob, payload: dict[str, Any], tpu: TpuSlice, *, policy: SlicePolicy, label: str, offline: bool
) -> dict[str, Any]:
    """Run ``job`` on one slice of type ``tpu`` until it succeeds or a budget is spent; process 0's summary."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError(
            f"{label}: a multi-host TPU slice ({tpu.shape()}) runs on a Ray cluster: "
            "build with --backend ray --ray_address ADDRESS"
        )
    if tpu.topology is None:
        raise RuntimeError(
            f"{label}: ray.util.tpu cannot reserve a {tpu.type} slice (no known topology); "
            "ask for a v4, v5p, v5litepod or v6e slice"
        )
    log_path = os.path.join(payload["output_path"], "logs", SLICE_LOG)
    preemptions = failures = 0
    attempt = 0
    while True:
        attempt += 1
        _note(
            log_path,
            f"attempt {attempt}: reserving one {tpu.type} slice ({tpu.vms} hosts x {tpu.chips_per_vm} "
            f"chips; preemptions so far {preemptions} of {policy.preemption_retries} allowed, "
            f"failures {failures} of {policy.failure_retries})",
        )
        handle = reserve_slice(tpu, policy.slice_wait, label, rule=job.rule)
        try:
            outcome, cause, summary = _attempt(job, handle, payload, tpu, offline)
        finally:
            handle.shutdown()
        if outcome is None:
            _note(log_path, f"attempt {attempt}: succeeded on every host")
            return summary
        first_line = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        _note(log_path, f"attempt {attempt}: {outcome}: {first_line}")
        if outcome == PREEMPTED:
            preemptions += 1
            if preemptions > policy.preemption_retries:
                raise SliceRunError(
                    f"{label}: preempted {preemptions} times on a TPU {tpu.type} slice "
                    f"(preemption_retries = {policy.preemption_retries}); last: {cause}"
                ) from cause
        else:
            failures += 1
            if failures > policy.failure_retries:
                raise SliceRunError(
                    f"{label}: {job.work} failed {failures} times on a TPU {tpu.type} slice "
                    f"(failure_retries = {policy.failure_retries}); last: {cause}"
                ) from cause
        say(f"{outcome} on the slice ({first_line}); reserving a slice again and {job.again}")


def reserve_slice(tpu: TpuSlice, wait: float, label: str, *, rule: str = "train_lm") -> Any:
    """A ready ``SlicePlacementGroup`` of one slice of type ``tpu`` (head reservation released), within ``wait`` s."""
    import ray
    from ray.util.tpu import slice_placement_group

    began = time.monotonic()
    try:
        handle = slice_placement_group(tpu.topology, tpu.generation, head_reservation_timeout_s=wait)
    except (TimeoutError, RuntimeError):
        raise SliceUnavailableError(unavailable_line(tpu, wait, label, rule=rule)) from None
    left = max(1.0, wait - (time.monotonic() - began))
    ready, _ = ray.wait([handle.placement_group.ready()], timeout=left)
    if not ready:
        handle.shutdown()
        raise SliceUnavailableError(unavailable_line(tpu, wait, label, rule=rule))
    handle.release_head_pgs()
    return handle


def unavailable_line(tpu: TpuSlice, wait: float, label: str, *, rule: str = "train_lm") -> str:
    """One line: the slice asked for, the wait, and the TPU slices the cluster has (by type, with host counts)."""
    import ray

    slices: dict[str, set[str]] = {}
    hosts: dict[str, int] = {}
    for node in ray.nodes():
        labels = node.get("Labels") or {}
        pod = labels.get("ray.io/tpu-pod-type")
        if not node.get("Alive") or not pod:
            continue
        slices.setdefault(pod, set()).add(labels.get("ray.io/tpu-slice-name") or node["NodeID"])
        hosts[pod] = hosts.get(pod, 0) + 1
    have = (
        ", ".join(
            f"{pod} x{len(names)} ({hosts[pod]} host{'s' if hosts[pod] != 1 else ''})"
            for pod, names in sorted(slices.items())
        )
        or "no TPU hosts"
    )
    return (
        f"{label}: no free TPU {tpu.type} slice ({tpu.vms} hosts x {tpu.chips_per_vm} chips) on the Ray cluster "
        f"after waiting {wait:g}s ({rule}'s slice_wait); the cluster has TPU slices: {have}"
    )


def _attempt(
    job: SliceJob, handle: Any, payload: dict[str, Any], tpu: TpuSlice, offline: bool
) -> tuple[str | None, BaseException | None, dict[str, Any]]:
    """Run ``job`` on every host of the reserved slice: (None, None, summary) or (outcome, cause, {})."""
    import ray
    from ray.util.tpu import run_on_slice

    coordinator = _coordinator_address(handle)
    refs = run_on_slice(_host_task(), job.module, job.name, payload, coordinator, tpu.vms, offline, tpu_slice=handle)
    pending = list(refs)
    results: list[tuple[int, dict[str, Any]]] = []
    errors: list[BaseException] = []
    while pending and not errors:
        done, pending = ray.wait(pending, num_returns=1)
        _collect(done, results, errors)
    if pending:  # one host ended with an error: the others get a moment to end on their own, then are stopped
        done, pending = ray.wait(pending, num_returns=len(pending), timeout=LOSS_GRACE)
        _collect(done, results, errors)
        for ref in pending:
            ray.cancel(ref, force=True)
        if pending:
            ray.wait(pending, num_returns=len(pending), timeout=CANCEL_WAIT)
    if not errors:
        return None, None, next(summary for worker, summary in results if worker == 0)
    kinds = [classify(e) for e in errors]
    for kind in (PREEMPTED, FAILED):
        if kind in kinds:
            return kind, _cause(errors[kinds.index(kind)]), {}
    return PREEMPTED, _cause(errors[0]), {}


def _collect(done: list[Any], results: list[tuple[int, dict[str, Any]]], errors: list[BaseException]) -> None:
    import ray

    for ref in done:
        try:
            results.append(ray.get(ref))
        except Exception as exc:
            errors.append(exc)


def classify(error: BaseException) -> str:
    """``preempted`` (a machine or process lost), ``failed`` (the job's code's error) or ``cancelled``."""
    from ray.exceptions import RayTaskError, TaskCancelledError

    if isinstance(error, TaskCancelledError):
        return CANCELLED
    if isinstance(error, RayTaskError):
        cause = error.cause
        if isinstance(cause, MlProcessError) and cause.returncode is not None and cause.returncode < 0:
            return PREEMPTED  # killed by a signal: a preempted VM, an OOM kill, a SIGKILL
        return FAILED
    return PREEMPTED  # node died, worker crashed, object or owner lost: the machine, not the code


def _cause(error: BaseException) -> BaseException:
    from ray.exceptions import RayTaskError

    return error.cause if isinstance(error, RayTaskError) and error.cause is not None else error


def _coordinator_address(handle: Any) -> str:
    """``ip:port`` of a free port on worker 0 of the reserved slice (JAX's coordinator when there is no TPU)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from ray.util.tpu import get_tpu_nodes_for_slice

    slice_name = handle.bundle_label_selector[0].get("ray.io/tpu-slice-name")
    nodes = get_tpu_nodes_for_slice(slice_name) if slice_name else []
    head = next((n for n in nodes if (n.get("Labels") or {}).get("ray.io/tpu-worker-id") == "0"), None)
    if head is None:
        raise RuntimeError(f"TPU slice {slice_name!r} has no worker 0 among its live nodes")
    probe = ray.remote(num_cpus=0, max_retries=0)(_free_port)
    port = ray.get(
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head["NodeID"], soft=False)).remote()
    )
    return f"{head['NodeManagerAddress']}:{port}"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


_HOST_TASK: Any = None


def _host_task() -> Any:
    """The Ray task of one host (``max_calls=1``: a fresh worker, as libtpu wants; no retry by Ray alone)."""
    global _HOST_TASK
    if _HOST_TASK is None:
        import ray

        _HOST_TASK = ray.remote(max_calls=1, max_retries=0)(run_on_host)
    return _HOST_TASK


def run_on_host(
    module: str, name: str, payload: dict[str, Any], coordinator: str, num_hosts: int, offline: bool
) -> tuple[int, dict[str, Any]]:
    """On one host of the slice: ``module`` as this host's process (its log ``<name>-host<id>``);
    (worker id, its summary)."""
    import ray

    labels = ray.get_runtime_context().get_node_labels()
    worker = int(labels.get("ray.io/tpu-worker-id", "0"))  # type: ignore[arg-type]  # ray declares list values; they are str
    chips = local_tpu_chips()
    distributed: Any = (
        True if chips else {"coordinator_address": coordinator, "num_processes": num_hosts, "process_id": worker}
    )
    # A host without TPU chips (a slice emulated on CPU nodes) runs on its CPU; a real one must find its TPU.
    payload = {**payload, "distributed": distributed, "require_accelerator": bool(chips)}
    summary = run_child(
        module,
        payload,
        log_dir=os.path.join(payload["output_path"], "logs"),
        name=f"{name}-host{worker}",
        offline=offline,
        env={"MARINBUILD_TPU_WORKER_ID": str(worker)},
    )
    return worker, summary


def _note(path: str, line: str) -> None:
    """Append ``line`` to the slice's log (``logs/slice.log`` in the step's output folder) and show it."""
    import fsspec

    say(line)
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {line}\n"
    try:
        if is_local(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as f:
                f.write(text)
            return
        fs, fs_path = fsspec.core.url_to_fs(path)
        old = fs.cat_file(fs_path).decode() if fs.exists(fs_path) else ""
        fs.pipe_file(fs_path, (old + text).encode())
    except OSError:  # the log is a convenience; the step's outcome does not depend on it
        pass
