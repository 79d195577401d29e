"""Where tokenize shards run: Ray tasks across the cluster, or a pool of local processes.

``open_pool(workers, resources, offline)`` picks by where the step runs. In a Ray task, ``RayPool``: each
shard a Ray task asking for ``resources`` (default one CPU), ``SPREAD`` over the nodes (tokenizing is
CPU-bound), at most ``window`` in flight (``ray.wait``, as Ray documents for bounding pending tasks); Ray
releases the waiting step's CPUs, so shards do not deadlock on them (other resources, such as memory or a
TPU, stay held: give the step no more than it needs). Otherwise, with ``threads``, ``ThreadPool`` (I/O-bound
work: ``download``'s files); else ``LocalPool``: ``workers`` spawned processes, each loading the tokenizer
once, dying with the build, their output appended to ``log_path``.

They run ``marinbuild.ml.shard_work``'s functions on plain-dict jobs: ``run(fn, jobs, on_result)`` calls
``on_result(job, result)`` as each finishes (on the calling thread) and raises the first job's error after
cancelling what has not started; ``call`` runs one job.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

from marinbuild.core.resources import normalize
from marinbuild.ml import shard_work
from marinbuild.ml.process import _die_with_parent_only

Job = dict[str, Any]  # jobs and results are plain dicts: they cross process and node boundaries
Work = Callable[[Job], Job]
OnResult = Callable[[Job, Job], None]
TICK = 2.0  # seconds between progress callbacks (``on_tick``) while shards run


class Pool(Protocol):
    name: str
    workers: int

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
    workers: int, resources: dict[str, Any] | None, offline: bool, log_path: str | None = None, threads: bool = False
) -> Pool:
    """``log_path``: where local workers' output goes (levanter logs every cache it writes). ``threads``: off
    Ray, threads of this process instead of processes (for work that waits on I/O, such as downloads)."""
    if in_ray_task():
        return RayPool(resources or {"cpu": 1}, workers)
    if threads:
        return ThreadPool(workers or default_workers())
    return LocalPool(workers or default_workers(), offline, log_path)


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def _init_worker(offline: bool, log_path: str | None) -> None:
    _die_with_parent_only()
    shard_work.set_worker_env(offline)
    if log_path is not None:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


class LocalPool:
    """Shards in local processes."""

    name = "local processes"

    def __init__(self, workers: int, offline: bool, log_path: str | None = None):
        self.workers = workers
        self._executor: cf.Executor = cf.ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(offline, log_path),
        )

    def run(self, fn: Work, jobs: list[Job], on_result: OnResult, on_tick: Callable[[], None] | None = None) -> None:
        pending = {self._executor.submit(fn, job): job for job in jobs}
        try:
            while pending:
                done, _ = cf.wait(pending, timeout=TICK, return_when=cf.FIRST_COMPLETED)
                for future in done:
                    job = pending.pop(future)
                    on_result(job, future.result())
                if on_tick is not None:
                    on_tick()
        finally:
            for future in pending:
                future.cancel()

    def call(self, fn: Work, job: Job) -> Job:
        return self._executor.submit(fn, job).result()

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class ThreadPool(LocalPool):
    """Jobs in threads of this process: for I/O-bound work (downloads), where a process per job buys nothing."""

    name = "local threads"

    def __init__(self, workers: int):
        self.workers = workers
        self._executor = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="marinbuild-pool")


class RayPool:
    """Shards as Ray tasks over the cluster."""

    name = "Ray tasks"

    def __init__(self, resources: dict[str, Any], window: int = 0):
        import ray

        self._ray = ray
        spec = normalize(resources)
        self._options = spec.to_ray_options() if spec is not None else {}
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = cpus
        self.window = window or max(8, 2 * cpus)
        self._remotes: dict[Any, Any] = {}

    def _remote(self, fn: Callable[..., Any]) -> Any:
        if fn not in self._remotes:
            self._remotes[fn] = self._ray.remote(fn).options(
                **self._options, max_retries=3, scheduling_strategy="SPREAD"
            )
        return self._remotes[fn]

    def run(self, fn: Work, jobs: list[Job], on_result: OnResult, on_tick: Callable[[], None] | None = None) -> None:
        ray = self._ray
        remote = self._remote(fn)
        queue = list(reversed(jobs))
        running: dict[Any, Job] = {}
        try:
            while queue or running:
                while queue and len(running) < self.window:
                    job = queue.pop()
                    running[remote.remote(job)] = job
                ready, _ = ray.wait(list(running), num_returns=1, timeout=TICK, fetch_local=True)
                for ref in ready:
                    job = running.pop(ref)
                    on_result(job, ray.get(ref))
                if on_tick is not None:
                    on_tick()
        finally:
            for ref in running:
                ray.cancel(ref, force=True)

    def call(self, fn: Work, job: Job) -> Job:
        return self._ray.get(self._remote(fn).remote(job))

    def close(self) -> None:
        pass
