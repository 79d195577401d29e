"""Where tokenize's shards and merge units (and download's files) run: long-lived workers fed job after job.

``open_pool(workers, resources, offline, log_path, threads, warm)`` picks by where the step runs:

- In a Ray task, ``RayPool``: actors of ``resources`` (default one CPU), spread over the nodes, each running
  ``warm`` once (tokenize: import levanter, load the tokenizer), then fed jobs once ready. At most every
  ``TICK`` seconds it reads ``ray.cluster_resources()`` and keeps one actor more than the cluster has room for
  (at most one per job left, and ``workers``, when given): Ray places that one, which starts warming up, the
  moment a node with room joins (and an autoscaler sees the demand); a node with more room gets the others
  within a tick. A node that leaves takes its actors, their jobs go back to the queue.
- Otherwise, with ``threads``, ``ThreadPool``: threads of this process (I/O-bound work: download's files).
- Otherwise ``LocalPool``: ``workers`` local processes (``local_workers``), idle warm ones claimed, others
  started at once (warming up while the step plans), fed one job at a time, their output appended to
  ``log_path``; at ``close`` they go back to waiting for the next step (or exit: ``MARINBUILD_WORKER_IDLE=0``).

A worker that dies mid-job is replaced and its job, only that one, runs again (``ATTEMPTS`` at most).
``run(fn, jobs, on_result, on_tick)`` calls ``on_result(job, result)`` on the calling thread as jobs finish and
raises the first job's error (jobs not started are dropped); ``call`` runs one job; ``workers``: how many are
ready. Jobs and results are plain dicts.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait
from typing import Any, Protocol

from marinbuild.core.resources import normalize
from marinbuild.ml import shard_work
from marinbuild.ml.local_workers import idle_timeout, key_folder, open_worker
from marinbuild.ml.process import _die_with_parent_only

Job = dict[str, Any]  # jobs and results are plain dicts: they cross process and node boundaries
Work = Callable[[Job], Job]
OnResult = Callable[[Job, Job], None]
Warm = tuple[Work, Job] | None  # run once in each worker before its first job
TICK = 2.0  # seconds between progress callbacks (``on_tick``) and looks at the cluster
ATTEMPTS = 3
logger = logging.getLogger("marinbuild.ml.shard_pool")


class Pool(Protocol):
    @property
    def workers(self) -> int: ...

    def run(
        self, fn: Work, jobs: list[Job], on_result: OnResult, on_tick: Callable[[], None] | None = None
    ) -> None: ...

    def call(self, fn: Work, job: Job) -> Job: ...

    def close(self) -> None: ...


def in_ray_task() -> bool:
    """Ray is initialized in this process (never imports ray when it is not loaded already)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def open_pool(
    workers: int,
    resources: dict[str, Any] | None,
    offline: bool,
    log_path: str | None = None,
    threads: bool = False,
    warm: Warm = None,
    expect: int = 0,
) -> Pool:
    """``log_path``: where local workers' output goes (levanter logs every cache it writes). ``threads``: off
    Ray, threads of this process instead of processes (for work that waits on I/O, such as downloads).
    ``expect``: about how many jobs will come (0: unknown), the actors a Ray pool starts before they do."""
    if in_ray_task():
        return RayPool(resources or {"cpu": 1}, workers, offline, warm, expect)
    if threads:
        return ThreadPool(workers or default_workers())
    return LocalPool(workers or default_workers(), offline, log_path, warm)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _call(pool: Pool, fn: Work, job: Job) -> Job:
    out: list[Job] = []
    pool.run(fn, [job], lambda _, result: out.append(result))
    return out[0]


def _what(job: Job) -> Any:
    return job.get("shard", {}).get("path") or job.get("id") or job.get("path")


def _retry(job: Job, tries: dict[int, int], why: str) -> None:
    tries[id(job)] = tries.get(id(job), 0) + 1
    if tries[id(job)] >= ATTEMPTS:
        raise RuntimeError(f"a worker died {ATTEMPTS} times running {_what(job)}: {why}")


def _init_worker(offline: bool, warm: Warm) -> None:
    _die_with_parent_only()
    shard_work.set_worker_env(offline)
    if warm is not None:
        with contextlib.suppress(Exception):  # a broken tokenizer fails the first job, with its own error
            warm[0](warm[1])


class LocalPool:
    """Jobs in local worker processes (``local_workers``): idle warm ones of this key claimed, others spawned."""

    def __init__(self, workers: int, offline: bool, log_path: str | None = None, warm: Warm = None):
        self.workers = workers
        folder = key_folder(offline) if idle_timeout() else None  # None: workers that serve only this step
        self._open = lambda: open_worker(folder, offline, (log_path, warm))
        self._procs = [self._open() for _ in range(workers)]

    def run(self, fn: Work, jobs: list[Job], on_result: OnResult, on_tick: Callable[[], None] | None = None) -> None:
        queue, busy, tries = deque(jobs), dict[int, Job](), dict[int, int]()
        try:
            while queue or busy:
                for n, worker in enumerate(self._procs):
                    if n in busy or not queue:
                        continue
                    if worker.conn.closed:
                        self._procs[n] = worker = self._open()
                    busy[n] = queue.popleft()
                    with contextlib.suppress(OSError):  # it died: found dead below, its job reruns
                        worker.conn.send((fn, busy[n]))
                wait([self._procs[n].conn for n in busy], timeout=TICK)
                for n in [n for n in busy if self._procs[n].conn.poll()]:
                    answer, job = None, busy.pop(n)
                    with contextlib.suppress(EOFError, OSError):
                        answer = self._procs[n].conn.recv()
                    if answer is None:  # the process died (killed, out of memory): its job runs again
                        self._procs[n].close()
                        _retry(job, tries, "its connection closed")
                        queue.appendleft(job)
                    elif not answer[0]:
                        raise answer[1]
                    else:
                        on_result(job, answer[1])
                if on_tick is not None:
                    on_tick()
        finally:
            for n in busy:  # abandoned: it exits (its step gone mid-job), its answer never reaches the next run
                self._procs[n].close()

    call = _call

    def close(self) -> None:
        for worker in self._procs:  # idle, every output committed: back to waiting for a step (or they exit)
            if not worker.conn.closed:
                worker.close()


class ThreadPool:
    """Jobs in threads of this process: for I/O-bound work (downloads), where a process per job buys nothing."""

    def __init__(self, workers: int):
        self.workers = workers
        self._executor = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="marinbuild-pool")

    def run(self, fn: Work, jobs: list[Job], on_result: OnResult, on_tick: Callable[[], None] | None = None) -> None:
        pending = {self._executor.submit(fn, job): job for job in jobs}
        try:
            while pending:
                done, _ = cf.wait(pending, timeout=TICK, return_when=cf.FIRST_COMPLETED)
                for future in done:
                    on_result(pending.pop(future), future.result())
                if on_tick is not None:
                    on_tick()
        finally:
            for future in pending:
                future.cancel()

    def call(self, fn: Work, job: Job) -> Job:
        return self._executor.submit(fn, job).result()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class _Actor:
    """A Ray pool's worker."""

    def __init__(self, offline: bool, warm: Warm):
        _init_worker(offline, warm)

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def run(self, fn: Work, job: Job) -> Job:
        return fn(job)


class RayPool:
    """Jobs in Ray actors over the cluster, as many as it has room for."""

    def __init__(
        self, resources: dict[str, Any], cap: int = 0, offline: bool = False, warm: Warm = None, expect: int = 0
    ):
        import ray

        self._ray = ray
        spec = normalize(resources)
        options = {"num_cpus": 1, **(spec.to_ray_options() if spec is not None else {})}
        need = {"CPU": options["num_cpus"], "GPU": options.get("num_gpus"), "memory": options.get("memory")}
        self._need = {k: float(v) for k, v in {**need, **options.get("resources", {})}.items() if v}
        self._class: Any = ray.remote(_Actor).options(**options, scheduling_strategy="SPREAD")
        self._args = (offline, warm)
        self._cap = cap
        self._starting: dict[Any, Any] = {}  # actor.node() ref: actor
        self._idle: list[tuple[Any, str]] = []  # (actor, its node)
        self._busy: dict[Any, tuple[Any, str, Job]] = {}  # actor.run() ref: (actor, node, job)
        self._looked = 0.0
        self._grow(expect or None)  # they warm up while the step plans

    @property
    def workers(self) -> int:
        return len(self._idle) + len(self._busy)

    def slots(self) -> int:
        """How many actors the cluster has room for, by its resources now."""
        total = self._ray.cluster_resources()
        return min(int(total.get(k, 0) // v) for k, v in self._need.items())

    def _grow(self, wanted: int | None) -> None:
        self._looked = time.monotonic()
        target = min([self.slots() + 1, *(n for n in (self._cap, wanted) if n)])  # one waits for a node
        while len(self._starting) + self.workers < target:
            actor = self._class.remote(*self._args)
            self._starting[actor.node.remote()] = actor

    def run(self, fn: Work, jobs: list[Job], on_result: OnResult, on_tick: Callable[[], None] | None = None) -> None:
        ray = self._ray
        queue, tries = deque(jobs), dict[int, int]()
        try:
            while queue or self._busy:
                if time.monotonic() - self._looked >= TICK or not (self._busy or self._starting or self._idle):
                    self._grow(len(queue) + len(self._busy))
                while queue and self._idle:
                    (actor, node), job = self._idle.pop(), queue.popleft()
                    self._busy[actor.run.remote(fn, job)] = (actor, node, job)
                ready, _ = ray.wait([*self._busy, *self._starting], num_returns=1, timeout=TICK)
                for ref in ready:
                    if ref in self._starting:
                        actor = self._starting.pop(ref)
                        with contextlib.suppress(ray.exceptions.RayActorError):  # it never started: gone
                            self._idle.append((actor, ray.get(ref)))
                        continue
                    actor, node, job = self._busy.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayActorError as e:  # its node left, or it was killed
                        logger.warning("a worker on node %s was lost running %s; it runs again", node, _what(job))
                        for other in [i for i in self._idle if i[1] == node]:  # its node's others: likely gone too
                            self._idle.remove(other)
                            ray.kill(other[0])
                        _retry(job, tries, str(e).splitlines()[0])
                        queue.appendleft(job)
                        continue
                    self._idle.append((actor, node))
                    on_result(job, result)
                if on_tick is not None:
                    on_tick()
        finally:
            for actor, _, _ in self._busy.values():  # abandoned mid-job: its actor goes
                ray.kill(actor)
            self._busy.clear()

    call = _call

    def close(self) -> None:
        for actor in [*self._starting.values(), *(a for a, _ in self._idle)]:
            self._ray.kill(actor)
