"""Step functions and small graphs shared by the engine tests (importable from subprocesses)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from marinbuild.executor import ExecutorStep, output_path_of, this_output_path, versioned

CALLS: list[str] = []
_CALLS_LOCK = threading.Lock()


def record_call(name: str) -> None:
    with _CALLS_LOCK:
        CALLS.append(name)
    log = os.environ.get("MARINBUILD_TEST_CALL_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{name}\n")


@dataclass(frozen=True)
class WriteConfig:
    output_path: Any
    text: Any = "x"
    inputs: Any = field(default_factory=list)
    note: Any = "unversioned"
    sleep: Any = 0.0


def write_text(config: WriteConfig) -> dict:
    """Concatenate the inputs' out.txt with ``text`` into out.txt."""
    record_call(config.output_path)
    if config.sleep:
        time.sleep(config.sleep)
    parts = []
    for path in config.inputs:
        with open(os.path.join(path, "out.txt")) as f:
            parts.append(f.read())
    parts.append(str(config.text))
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "out.txt"), "w") as f:
        f.write("+".join(parts))
    return {"text": "+".join(parts)}


def fail_always(config: WriteConfig) -> None:
    record_call(config.output_path)
    raise RuntimeError(f"boom in {config.output_path}")


def announce_and_hang(config: WriteConfig) -> None:
    """Tell the parent process we are running (a line on stdout), then hang until killed."""
    os.makedirs(config.output_path, exist_ok=True)
    with open(os.path.join(config.output_path, "partial.txt"), "w") as f:
        f.write("half")
    print("STARTED", flush=True)
    time.sleep(600)


def step(
    name: str,
    text: str = "x",
    inputs: list[ExecutorStep] | None = None,
    fn: Any = write_text,
    note: str = "unversioned",
    sleep: float = 0.0,
) -> ExecutorStep:
    return ExecutorStep(
        name=name,
        fn=fn,
        config=WriteConfig(
            output_path=this_output_path(),
            text=versioned(text),
            inputs=[output_path_of(s) for s in inputs or []],
            note=note,
            sleep=sleep,
        ),
    )


def shared_ancestor_graph(tag: str, sleep: float = 0.0) -> list[ExecutorStep]:
    """root -> tag-specific leaf; two pipelines with different tags share root."""
    root = step("shared/root", "root", sleep=sleep)
    leaf = step(f"shared/leaf-{tag}", tag, inputs=[root])
    return [leaf]


if __name__ == "__main__":
    # python pipelines.py PREFIX MODE [ARG]: build a graph in a subprocess.
    from marinbuild.executor import Executor

    prefix, mode = sys.argv[1], sys.argv[2]
    executor = Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        heartbeat_interval=0.2,
        stale_after=2.0,
        listeners=[],
    )
    if mode == "shared":
        executor.run(shared_ancestor_graph(sys.argv[3], sleep=0.5))
    elif mode == "hang":
        executor.run([step("victim", "v", fn=announce_and_hang)])
    print(json.dumps({"ok": True}), flush=True)


def race_for_lease(output_path: str, contenders: int = 8) -> tuple[list[int], list[Any]]:
    """``contenders`` runners try to take one step's lease at the same moment, each on a thread of its own;
    the numbers of those that got it, and every runner's lease."""
    from marinbuild.store.lease_factory import lease_for

    leases = [lease_for(output_path, f"r{i}", stale_after=30) for i in range(contenders)]
    winners: list[int] = []
    barrier = threading.Barrier(contenders)

    def contend(i: int) -> None:
        barrier.wait()
        if leases[i].try_acquire():
            winners.append(i)

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return winners, leases


def pretend_another_version_built(output_path: str, version_str: str, other_digest: str) -> None:
    """Move the action record at ``output_path`` to another version digest: as if another version string that
    hashes to the same 6-hex path had built it."""
    from marinbuild.store import action_cache

    ours = action_cache.version_digest(version_str)
    record = action_cache.read_record(output_path, ours)
    action_cache.remove_record(output_path, ours)
    action_cache.write_record(action_cache.ActionRecord(**{**record.__dict__, "version_sha256": other_digest}))


def check_lease_protocol(output_path: str, implementation: str, stale_after: float) -> None:
    """What every lease implementation keeps: one holder at a time, seen by the others; a stale lease is taken
    over; the runner that lost it learns so at its next check or renewal, and never deletes the new holder's."""
    import pytest

    from marinbuild.store import fs
    from marinbuild.store.lease import LeaseLostError, lease_path
    from marinbuild.store.lease_factory import lease_for

    a = lease_for(output_path, "runner-a", stale_after=stale_after)
    b = lease_for(output_path, "runner-b", stale_after=stale_after)
    assert type(a).__name__ == implementation
    assert a.try_acquire()
    assert not b.try_acquire()
    assert b.holder().worker_id == "runner-a"
    assert b.held_by_other_live().worker_id == "runner-a"
    a.refresh()
    a.confirm()
    b.release()  # not b's: left alone
    assert b.holder().worker_id == "runner-a"
    time.sleep(stale_after * 1.5)  # a stops renewing: stale
    assert b.try_acquire()
    with pytest.raises(LeaseLostError, match="runner-b"):
        a.check()  # a must write nothing more
    with pytest.raises(LeaseLostError, match="runner-b"):
        a.refresh()
    a.release()  # never deletes b's lease
    assert b.holder().worker_id == "runner-b"
    b.release()
    assert b.holder() is None
    assert fs.read_bytes(lease_path(output_path)) is None
