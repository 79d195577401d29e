"""Step functions for the Ray backend tests (imported by Ray workers), and subprocess drivers.

python ray_steps.py shared ADDRESS PREFIX TAG CALL_LOG   build pipelines.shared_ancestor_graph(TAG) on Ray
python ray_steps.py hang ADDRESS PREFIX                  build a step that hangs; on Ctrl-C report what is left
python ray_steps.py probes ADDRESS PREFIX N              build N probe steps (their config class is __main__'s)
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.executor import ExecutorStep, this_output_path, versioned
from marinbuild.store import fs

THIEF = "another-runner"
"""The worker id ``steal_lease`` writes into the lease."""


@dataclass(frozen=True)
class ProbeConfig:
    output_path: Any = field(default_factory=this_output_path)
    text: Any = "x"
    log_dir: Any = None
    """Where attempts are recorded (unversioned): one file per call."""


def _record(config: ProbeConfig, what: str) -> int:
    """Note one attempt; how many attempts there were before it."""
    if config.log_dir is None:
        return 0
    os.makedirs(config.log_dir, exist_ok=True)
    before = len(os.listdir(config.log_dir))
    Path(config.log_dir, f"{what}-{os.getpid()}-{time.monotonic_ns()}").write_text(_node_id())
    return before


def _node_id() -> str:
    import ray

    return ray.get_runtime_context().get_node_id()


def where(config: ProbeConfig) -> dict:
    """Write the id of the Ray node (and the pid) this ran on."""
    _record(config, "where")
    os.makedirs(config.output_path, exist_ok=True)
    facts = {"node_id": _node_id(), "pid": os.getpid()}
    Path(config.output_path, "where.json").write_text(json.dumps(facts))
    return facts


def slow_first_attempt(config: ProbeConfig) -> dict:
    """The first attempt announces itself and hangs (to be killed with its node); later ones finish."""
    before = _record(config, "attempt")
    if before == 0:
        time.sleep(300)
    return where(ProbeConfig(output_path=config.output_path, text=config.text))


def where_once_marked(config: ProbeConfig) -> dict:
    """Wait (at most ``text`` seconds) for a ``mark`` file in ``log_dir``; then as ``where``, saying if it came."""
    deadline = time.monotonic() + float(config.text)
    mark = Path(config.log_dir, "mark")
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    facts = where(ProbeConfig(output_path=config.output_path))
    return {**facts, "saw_mark": mark.exists()}


def reports_until_heard(config: ProbeConfig) -> dict:
    """Report progress every 0.1 s until the driver heard a report (a ``mark`` file in ``log_dir``; at most 60 s)."""
    from marinbuild.run.step_progress import report

    mark, sent = Path(config.log_dir, "mark"), 0
    deadline = time.monotonic() + 60
    while not mark.exists() and time.monotonic() < deadline:
        sent += 1
        report(f"report {sent}", sent=sent)
        time.sleep(0.1)
    return {"heard": mark.exists(), "sent": sent}


def reports_once(config: ProbeConfig) -> dict:
    """Report progress once and end (long before a driver's relay starts)."""
    from marinbuild.run.step_progress import report

    report("the only report", n=1)
    return where(config)


def where_then_mark(config: ProbeConfig) -> dict:
    """As ``where`` (``text`` is another step's output path, a dependency); then leave ``mark`` in ``log_dir``."""
    facts = where(ProbeConfig(output_path=config.output_path))
    Path(config.log_dir, "mark").write_text(facts["node_id"])
    return facts


def where_after(config: ProbeConfig) -> dict:
    """As ``where``; its ``text`` is another step's output path (a dependency)."""
    return where(ProbeConfig(output_path=config.output_path))


def die(config: ProbeConfig) -> None:
    """Kill its own worker process, on every attempt."""
    _record(config, "die")
    os._exit(1)


def raise_value_error(config: ProbeConfig) -> None:
    _record(config, "raise")
    raise ValueError(f"boom {config.text}")


def lease_seen(config: ProbeConfig) -> dict:
    """What the step sees of its own folder while it runs: who holds the lease, the status, the info file."""
    from marinbuild.store import records
    from marinbuild.store import status as st
    from marinbuild.store.lease import lease_path, parse_lease

    path = lease_path(config.output_path)
    data = fs.read_bytes(path)
    holder = parse_lease(path, data) if data is not None else None
    return {
        "lease": holder.worker_id if holder else None,
        "status": st.read_status(config.output_path),
        "info": records.read_info(config.output_path) is not None,
        "pid": os.getpid(),
    }


def steal_lease(config: ProbeConfig) -> dict:
    """Another runner takes the step's lease over while it runs (as after a missed heartbeat); then it finishes."""
    from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path

    fs.write_atomic(fs.join(config.output_path, "out.txt"), b"done")
    fs.write_atomic(lease_path(config.output_path), encode_lease(LeaseRecord(THIEF, time.time())))
    return {"ran": True}


def damage_lease(config: ProbeConfig) -> dict:
    """The lease file turns into something that is not a lease (read by the commit's check)."""
    from marinbuild.store.lease import lease_path

    fs.write_atomic(lease_path(config.output_path), b"not json")
    return {"ran": True}


def leases_held(config: ProbeConfig) -> dict:
    """How many step leases exist under ``log_dir`` (the build's prefix) while this step runs."""
    held = [
        os.path.join(d, f) for d, _, files in os.walk(config.log_dir) for f in files if f == ".executor_status.lock"
    ]
    return {"leases": len(held)}


def env_probe(config: ProbeConfig) -> dict:
    """The task's ``PROBE`` environment variable and node."""
    return {"PROBE": os.environ.get("PROBE"), "node_id": _node_id()}


def write_gs(config: ProbeConfig) -> dict:
    """Write ``out.txt`` (``text``) to a gs:// output; return the node it ran on."""
    fs.write_atomic(fs.join(config.output_path, "out.txt"), str(config.text).encode())
    return {"text": config.text, "node_id": _node_id()}


def hang(config: ProbeConfig) -> None:
    os.makedirs(config.output_path, exist_ok=True)
    Path(config.output_path, "pid").write_text(str(os.getpid()))
    time.sleep(300)


def probe(name: str, fn: Any = where, text: str = "x", log_dir: str | None = None, **step: Any) -> ExecutorStep:
    return ExecutorStep(name=name, fn=fn, config=ProbeConfig(text=versioned(text), log_dir=log_dir), **step)


def _main() -> None:
    from marinbuild.executor import Executor
    from marinbuild.run.ray_backend import RayBackend

    mode, address, prefix = sys.argv[1:4]
    info = os.path.join(prefix, "experiments")
    if mode == "shared":
        import pipelines

        tag, log = sys.argv[4:6]
        backend = RayBackend(address=address, env_vars={"MARINBUILD_TEST_CALL_LOG": log})
        Executor(
            prefix=prefix,
            executor_info_base_path=info,
            listeners=[],
            backend=backend,
            heartbeat_interval=0.5,
            stale_after=5,
        ).run(pipelines.shared_ancestor_graph(tag, sleep=1.0))
        print(json.dumps({"ok": True}), flush=True)
    elif mode == "probes":
        steps = [probe(f"main/p{i}", text=str(i)) for i in range(int(sys.argv[4]))]
        executor = Executor(prefix=prefix, executor_info_base_path=info, listeners=[], backend=RayBackend(address))
        paths = executor.run(steps)
        print(
            json.dumps({"outputs": [paths[s] for s in steps], "config_module": type(steps[0].config).__module__}),
            flush=True,
        )
    elif mode == "hang":
        step = probe("hang", fn=hang)
        executor = Executor(prefix=prefix, executor_info_base_path=info, listeners=[], backend=RayBackend(address))
        executor.compute_version(step)
        out = executor.output_paths[step]
        print(json.dumps({"output_path": out}), flush=True)
        try:
            executor.run([step])
        except KeyboardInterrupt:
            pid = int(Path(out, "pid").read_text())
            deadline = time.monotonic() + 20
            alive = True
            while alive and time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                    time.sleep(0.1)
                except ProcessLookupError:
                    alive = False
            lease = os.path.exists(os.path.join(out, ".executor_status.lock"))
            print(json.dumps({"interrupted": True, "task_alive": alive, "lease_left": lease}), flush=True)


if __name__ == "__main__":
    _main()
