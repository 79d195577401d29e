"""A levanter job (``SliceJob``: ``TRAIN``, ``EVAL_HARNESS``) on multi-host TPU slices: one process per host, all
together, restarted whole on a loss (docs/tpu.md).

``run_on_tpu_slice`` runs in the step's own Ray task (holding no TPU). Each attempt reserves every slice at once
(``slice_placement_group``, within ``slice_wait``, else ``SliceUnavailableError``); starts the module on every host as a
child process (``ml.process``) with its slice's MEGASCALE variables (hosts without chips get JAX's coordinator and use
gloo, the slices as one flat job); and waits, cancelling the others ``LOSS_GRACE`` seconds after one error. As Marin's
fray decides, a lost node or worker or a process killed from outside (``KILLED_BY``) is a preemption
(``preemption_retries``), an error exit or a crash of the process itself (an abort, a segfault) a failure
(``failure_retries``): a host that aborts because its peer raised is the peer's failure, not a preemption to retry
a hundred times. Within budget all starts again, else ``SliceRunError`` names the cause and the host's log.
``logs/slice.log`` has a line per attempt; the result is process 0's summary."""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any

from marinbuild.core.resources import TpuSlice
from marinbuild.ml.process import MlProcessError, is_local, run_child, say
from marinbuild.run import compute
from marinbuild.run.resources import local_tpu_chips
from marinbuild.run.step_progress import report

LOSS_GRACE = 20.0
"""Seconds the other hosts of a slice get to end on their own after one host's process ended with an error."""
CANCEL_WAIT = 120.0
"""Seconds to wait for cancelled host tasks to end before the slice's placement group is removed anyway."""
SLICE_LOG = "slice.log"
SLICE_WAIT = 6 * 3600.0
"""The default wait for free slices: Ray's autoscaler can take hours to bring a large slice (back) up."""
WAIT_REPORT = 60.0  # Seconds between progress reports while waiting for slices (at most; a third of a shorter wait).

PREEMPTED, FAILED, CANCELLED = "preempted", "failed", "cancelled"
KILLED_BY = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGHUP, signal.SIGINT})  # from outside: a preemption


@dataclass(frozen=True)
class SlicePolicy:
    """How long to wait for a slice, and how many times to start over after a preemption or a failure."""

    slice_wait: float = SLICE_WAIT
    """Seconds to wait for free slices (head reservations and every host's bundle) before failing."""
    preemption_retries: int = 100  # Restarts after a preemption (a host lost, or its process killed: KILLED_BY).
    failure_retries: int = 2  # Restarts after a failure of the job's code (a process that exited with an error).


@dataclass(frozen=True)
class SliceJob:
    """What runs on every host of a slice, and how messages name it."""

    module: str  # The child module each host runs (``python -m module``, ``marinbuild.ml.process``).
    name: str  # Its log's name: ``logs/<name>-host<worker id>.log``.
    rule: str  # The rule whose attributes (``slice_wait``, the retry budgets) messages point at.
    work: str  # What the job does, in messages ("training").
    again: str  # What a restart does, in messages.


TRAIN = SliceJob("marinbuild.ml.train", "train", "train_lm", "training", "resuming from the latest checkpoint")
EVAL_HARNESS = SliceJob(
    "marinbuild.ml.eval_harness", "eval", "eval_harness", "evaluation", "evaluating again from the start"
)


class SliceUnavailableError(RuntimeError):
    """No slice of the asked type could be reserved within ``SlicePolicy.slice_wait`` seconds."""


class SliceRunError(RuntimeError):
    """The job on the slice was preempted or failed more often than its budget allows."""


def run_on_tpu_slice(
    job: SliceJob,
    payload: dict[str, Any],
    tpu: TpuSlice,
    *,
    slices: int = 1,
    policy: SlicePolicy,
    label: str,
    offline: bool,
) -> dict[str, Any]:
    """Run ``job`` on ``slices`` slices of type ``tpu`` until it succeeds or a budget is spent; process 0's summary."""
    import ray

    if not ray.is_initialized():
        raise RuntimeError(
            f"{label}: a multi-host TPU job ({tpu.shape(slices)}) runs on a Ray cluster: "
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
    what = f"{slices} {tpu.type} slices" if slices > 1 else f"one {tpu.type} slice"
    where = f"TPU {tpu.type} slice{'s' if slices > 1 else ''}"
    while True:
        attempt += 1
        _note(
            log_path,
            f"attempt {attempt}: reserving {what} ({tpu.vms} host{'s' if tpu.vms > 1 else ''} x {tpu.chips_per_vm} "
            f"chips{' each' if slices > 1 else ''}; preemptions so far {preemptions} of "
            f"{policy.preemption_retries} allowed, failures {failures} of {policy.failure_retries})",
        )
        handle = reserve_slice(tpu, policy.slice_wait, label, rule=job.rule, slices=slices)
        held = time.time()
        try:
            outcome, cause, summary = _attempt(job, handle, payload, offline)
        finally:
            handle.shutdown()
            compute.note(payload["output_path"], tpu_seconds=time.time() - held, attempts=attempt > 1)
        if outcome is None:
            _note(log_path, f"attempt {attempt}: succeeded on every host")
            return summary
        first_line = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        _note(log_path, f"attempt {attempt}: {outcome}: {first_line}")
        if outcome == PREEMPTED:
            preemptions += 1
            compute.note(payload["output_path"], preemptions=1)
            if preemptions > policy.preemption_retries:
                raise SliceRunError(
                    f"{label}: preempted {preemptions} times on a {where} "
                    f"(preemption_retries = {policy.preemption_retries}); last: {cause}"
                ) from cause
        else:
            failures += 1
            if failures > policy.failure_retries:
                raise SliceRunError(
                    f"{label}: {job.work} failed {failures} times on a {where} "
                    f"(failure_retries = {policy.failure_retries}); last: {cause}"
                ) from cause
        say(f"{outcome} on the {where} ({first_line}); reserving again and {job.again}")


def reserve_slice(tpu: TpuSlice, wait: float, label: str, *, rule: str = "train_lm", slices: int = 1) -> Any:
    """A ready ``SlicePlacementGroup`` of ``slices`` slices of ``tpu`` (heads released), within ``wait`` s."""
    import ray
    from ray.util.tpu import slice_placement_group

    began = time.monotonic()
    every = min(WAIT_REPORT, max(1.0, wait / 3))
    what = f"{slices} free TPU {tpu.type} slices" if slices > 1 else f"a free TPU {tpu.type} slice"

    def waiting() -> None:
        waited = time.monotonic() - began
        report(f"waiting for {what}: {_duration(waited)} of {_duration(wait)}", waited=waited, slice_wait=wait)

    reserved: dict[str, Any] = {}
    done = threading.Event()

    def reserve() -> None:  # Ray's head reservation blocks: in a thread, so the wait can be reported meanwhile
        try:
            # Ray reserves single-host slices by their chips alone, which a multi-host slice's host also has:
            # the hosts must be of this type (the label Ray gives TPU VMs).
            pod = [{"ray.io/tpu-pod-type": tpu.type}] * slices
            single = {} if tpu.multi_host else {"chips_per_vm": tpu.chips_per_vm, "bundle_label_selector": pod}
            reserved["handle"] = slice_placement_group(
                tpu.topology, tpu.generation, num_slices=slices, head_reservation_timeout_s=wait, **single
            )
        except Exception as exc:  # raised again below, in the step's thread
            reserved["error"] = exc
        finally:
            done.set()

    threading.Thread(target=reserve, name="marinbuild-slice-reservation", daemon=True).start()
    while not done.wait(every):
        waiting()
    error = reserved.get("error")
    if isinstance(error, TimeoutError | RuntimeError):
        raise SliceUnavailableError(unavailable_line(tpu, wait, label, rule=rule, slices=slices)) from None
    if error is not None:
        raise error
    handle = reserved["handle"]
    ready: list[Any] = []
    while not ready and (left := wait - (time.monotonic() - began)) > 0:
        ready, _ = ray.wait([handle.placement_group.ready()], timeout=min(left, every))
        if not ready:
            waiting()
    if not ready:
        handle.shutdown()
        raise SliceUnavailableError(unavailable_line(tpu, wait, label, rule=rule, slices=slices))
    handle.release_head_pgs()
    return handle


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


def unavailable_line(tpu: TpuSlice, wait: float, label: str, *, rule: str = "train_lm", slices: int = 1) -> str:
    """One line: the slice asked for, the wait, and the TPU slices the cluster has (by type, with host counts)."""
    import ray

    by_pod: dict[str, set[str]] = {}
    hosts: dict[str, int] = {}
    for node in ray.nodes():
        labels = node.get("Labels") or {}
        pod = labels.get("ray.io/tpu-pod-type")
        if not node.get("Alive") or not pod:
            continue
        by_pod.setdefault(pod, set()).add(labels.get("ray.io/tpu-slice-name") or node["NodeID"])
        hosts[pod] = hosts.get(pod, 0) + 1
    have = (
        ", ".join(
            f"{pod} x{len(names)} ({hosts[pod]} host{'s' if hosts[pod] != 1 else ''})"
            for pod, names in sorted(by_pod.items())
        )
        or "no TPU hosts"
    )
    asked = f"{slices} free TPU {tpu.type} slices" if slices > 1 else f"free TPU {tpu.type} slice"
    return (
        f"{label}: no {asked} ({tpu.vms} host{'s' if tpu.vms > 1 else ''} x {tpu.chips_per_vm} chips) on the Ray "
        f"cluster after waiting {wait:g}s ({rule}'s slice_wait); the cluster has TPU slices: {have}"
    )


def _attempt(
    job: SliceJob, handle: Any, payload: dict[str, Any], offline: bool
) -> tuple[str | None, BaseException | None, dict[str, Any]]:
    """Run ``job`` on every host of the reserved slices: (None, None, summary) or (outcome, cause, {})."""
    import ray
    from ray.util.tpu import run_on_slice

    layout = host_layout(handle)
    pending = list(run_on_slice(_host_task(), job.module, job.name, payload, layout, offline, tpu_slice=handle))
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
        return None, None, next(summary for process, summary in results if process == 0)
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
        if isinstance(cause, MlProcessError) and cause.returncode is not None and -cause.returncode in KILLED_BY:
            return PREEMPTED
        return FAILED  # the code's error, or the process's own crash (SIGABRT, SIGSEGV)
    return PREEMPTED  # node died, worker crashed, object or owner lost: the machine, not the code


def _cause(error: BaseException) -> BaseException:
    from ray.exceptions import RayTaskError

    return error.cause if isinstance(error, RayTaskError) and error.cause is not None else error


def host_layout(handle: Any) -> dict[str, Any]:
    """Each node's (slice, worker id), the slice and host counts, and slice 0 worker 0's address with a free port."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    bundles = ray.util.placement_group_table(handle.placement_group)["bundles_to_node_id"]
    per_slice = handle.num_bundles // handle.num_slices
    nodes = {n["NodeID"]: n for n in ray.nodes()}
    hosts: dict[str, tuple[int, int]] = {}
    for index, node_id in bundles.items():
        labels = nodes[node_id].get("Labels") or {}
        hosts[node_id] = (int(index) // per_slice, int(labels.get("ray.io/tpu-worker-id", "0")))
    head = next((n for n, place in hosts.items() if place == (0, 0)), None)
    if head is None:
        raise RuntimeError("the reserved TPU slices have no worker 0 in slice 0 among their live nodes")
    probe = ray.remote(num_cpus=0, max_retries=0)(_free_port)
    port = ray.get(probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(head, soft=False)).remote())
    ip = nodes[head]["NodeManagerAddress"]
    return {
        "hosts": hosts,
        "slices": handle.num_slices,
        "per_slice": per_slice,
        "coordinator_ip": ip,
        "coordinator": f"{ip}:{port}",
    }


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
    module: str, name: str, payload: dict[str, Any], layout: dict[str, Any], offline: bool
) -> tuple[int, dict[str, Any]]:
    """On one host: ``module`` as its process, logging to ``<name>[-slice<k>]-host<id>``; (process id, summary)."""
    import ray
    from ray.util.tpu import get_tpu_coordinator_env_vars

    slice_id, worker = layout["hosts"][ray.get_runtime_context().get_node_id()]
    process = slice_id * layout["per_slice"] + worker
    chips = local_tpu_chips()
    distributed: Any = (
        True
        if chips
        else {
            "coordinator_address": layout["coordinator"],
            "num_processes": len(layout["hosts"]),
            "process_id": process,
        }
    )
    # A host without TPU chips (a slice emulated on CPU nodes) runs on its CPU; a real one must find its TPU.
    payload = {**payload, "distributed": distributed, "require_accelerator": bool(chips)}
    env = {"MARINBUILD_TPU_WORKER_ID": str(worker), "MARINBUILD_TPU_SLICE_ID": str(slice_id)}
    if layout["slices"] > 1:
        env.update(get_tpu_coordinator_env_vars(layout["coordinator_ip"], layout["slices"], slice_id))
    summary = run_child(
        module,
        payload,
        log_dir=os.path.join(payload["output_path"], "logs"),
        name=f"{name}-slice{slice_id}-host{worker}" if layout["slices"] > 1 else f"{name}-host{worker}",
        offline=offline,
        env=env,
    )
    return process, summary


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
