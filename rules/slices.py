"""What the levanter rules share (``train_lm``, ``eval_harness``, ``eval_lm``); no rule.

``job_attrs``: ``resources`` and, for multi-host slices, ``slice_wait`` and two retry budgets (unversioned: where a job
runs never changes its output). ``run_job`` runs on the slices (``ml.slice_run``), else in one child process
(``ml.process``). ``tokenized``: the tokenize outputs a job reads, by name; ``offline``: whether it needs the Hub."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr

if TYPE_CHECKING:
    from marinbuild.ml.slice_run import SliceJob


def job_attrs(code: str) -> dict[str, Any]:
    """``code`` names the job's code in the doc of ``failure_retries`` ("the training code")."""
    return {
        "resources": attr.dict(versioned=False, doc='what the step asks the backend for: tpu("v4-8"), {"cpu": 2}'),
        "slice_wait": attr.float(
            default=6 * 3600.0, versioned=False, doc="multi-host slice: seconds to wait for free slices before failing"
        ),
        "preemption_retries": attr.int(
            default=100, versioned=False, doc="multi-host slice: restarts after a host or its process is lost"
        ),
        "failure_retries": attr.int(default=2, versioned=False, doc=f"multi-host slice: restarts after {code} fails"),
    }


def tokenized(paths: list[str], what: str, split: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{name: (path, its tokenized.json)}`` of tokenize outputs with a ``split``, each named as it names itself."""
    from marinbuild.ml.tokenize import read_metadata

    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in paths:
        meta = read_metadata(path)
        if split not in meta.get("splits", {}):
            raise ValueError(f"{what}: {path} has no {split} split")
        base = meta.get("name") or os.path.basename(path.rstrip("/"))
        name, n = base, 2
        while name in out:
            name, n = f"{base}_{n}", n + 1
        out[name] = (path, meta)
    return out


def offline(tokenizer: str, specs: list[dict[str, Any]], task_files: dict[str, str]) -> bool:
    """A local tokenizer and local lm-eval tasks only (registry tasks fetch their data): the job needs no Hub."""
    return ("://" in tokenizer or os.path.isdir(tokenizer)) and all(is_local_task(s["task"], task_files) for s in specs)


def is_local_task(name: str, task_files: dict[str, str]) -> bool:
    """Whether one of the task YAMLs declares ``task: name`` (a plain text check; lm-eval parses them for real)."""
    for path in task_files.values():
        if path.endswith((".yaml", ".yml")):
            with open(path) as f:
                if any(line.split("#")[0].strip() in (f"task: {name}", f'task: "{name}"') for line in f):
                    return True
    return False


def run_job(ctx: RuleContext, job: SliceJob, payload: dict[str, Any], *, log_name: str, offline: bool) -> Any:
    """Run ``job`` with ``payload`` where ``ctx.attr.resources`` says (one machine: ``logs/<log_name>.log``)."""
    from marinbuild.core.resources import normalize, tpu_slice
    from marinbuild.ml import slice_run
    from marinbuild.ml.process import run_child

    request = normalize(ctx.attr.resources or None)
    if request is not None and request.multi_host:
        policy = slice_run.SlicePolicy(
            slice_wait=ctx.attr.slice_wait,
            preemption_retries=ctx.attr.preemption_retries,
            failure_retries=ctx.attr.failure_retries,
        )
        return slice_run.run_on_tpu_slice(
            job,
            payload,
            tpu_slice(request.tpu),
            slices=request.slices,
            policy=policy,
            label=f"{job.rule} {ctx.label}",
            offline=offline,
        )
    return run_child(job.module, payload, log_dir=os.path.join(ctx.output_path, "logs"), name=log_name, offline=offline)
