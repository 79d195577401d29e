"""``eval_harness``: a trained model's scores on lm-eval-harness tasks, through levanter's lm-eval integration.

    load("@marinbuild//rules:eval_harness.py", "eval_harness")

    eval_harness(
        name = "core_tasks",
        model = ":lm",                                    # a train_lm target (its latest checkpoint)
        tasks = [
            "lambada_openai",                             # a task of lm-eval's registry, its own few-shot
            {"task": "hellaswag", "num_fewshot": 10, "task_alias": "hellaswag_10shot"},
            {"task": "my_task", "num_fewshot": 2},        # defined by a YAML of task_files
        ],
        task_files = glob(["tasks/*"]),                   # local task YAMLs and their data files
        max_examples = 0,                                 # at most this many documents per task (0: all)
        resources = tpu("v4-8"),                          # as for train_lm; not versioned
    )

A task is a name or a dict with ``task`` and optionally ``num_fewshot`` and ``task_alias`` (the
name its results go by; needed to run one task twice, e.g. 0-shot and 10-shot). The tasks, their
few-shot counts, ``max_examples``, ``batch_size``, the model and the content of ``task_files``
are the version; ``resources`` is not. ``task_files`` are workspace files of this package:
lm-eval task YAMLs (lm-eval's ``include_path``) and the data they read; a YAML names its data
relative to the package (``dataset_path: json`` with ``dataset_kwargs: {data_files: {test:
tasks/x.jsonl}}``), so a task runs offline. Tasks of lm-eval's registry load their data from
the Hugging Face Hub when the step runs (never while the graph is loaded or dry-run).

The output is ``results.json`` (per task its metrics, e.g. ``acc`` and ``acc_norm``; the
averages over tasks; documents per task) and ``lm_eval_output.json`` (lm-eval's whole output);
see ``marinbuild.ml.eval_harness``. A task name lm-eval does not know fails the step at once,
naming it. ``report`` shows the results next to the loss plot (``evals = [...]``).
``resources`` are read as ``train_lm`` reads them (``tpu("v4-8")``, ``{"cpu": 2}``, ``{"gpu": 1}``):
the local backend refuses TPUs or GPUs this machine lacks. On a multi-host slice
(``tpu("v4-16")``, Ray backend) the evaluation runs as training does (``marinbuild.ml.slice_run``):
one process per host, one JAX distributed job; levanter runs lm-eval on process 0, the other
hosts compute its batches, and process 0 alone writes the results. ``slice_wait``,
``preemption_retries`` and ``failure_retries`` mean what they mean for ``train_lm``; a restarted
evaluation starts over. Generation tasks (lm-eval's ``generate_until``) are single-host only in
levanter and fail on a multi-host slice with levanter's own error.
"""

from __future__ import annotations

import os
from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule

from . import slices

TASK_KEYS = {"task", "num_fewshot", "task_alias"}


def task_specs(tasks: list[Any], where: str) -> list[dict[str, Any]]:
    """The ``tasks`` attribute as dicts with a ``task`` name; a ValueError naming a malformed entry after ``where``."""
    if not tasks:
        raise ValueError(f"{where}: tasks is empty: name at least one lm-eval task")
    specs: list[dict[str, Any]] = []
    for i, task in enumerate(tasks):
        spec = {"task": task} if isinstance(task, str) else dict(task) if isinstance(task, dict) else None
        if spec is None or not isinstance(spec.get("task"), str) or not spec["task"]:
            raise ValueError(f"{where}: tasks[{i}] must be a task name or a dict with 'task'; got {task!r}")
        extra = set(spec) - TASK_KEYS
        if extra:
            raise ValueError(
                f"{where}: tasks[{i}] ({spec['task']}): unknown keys {sorted(extra)}; allowed: {sorted(TASK_KEYS)}"
            )
        fewshot = spec.get("num_fewshot")
        if fewshot is not None and (not isinstance(fewshot, int) or isinstance(fewshot, bool) or fewshot < 0):
            raise ValueError(
                f"{where}: tasks[{i}] ({spec['task']}): num_fewshot must be an integer >= 0; got {fewshot!r}"
            )
        specs.append(spec)
    return specs


def _eval_harness_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.core.resources import normalize
    from marinbuild.ml.eval_harness import trained_tokenizer
    from marinbuild.ml.slice_run import EVAL_HARNESS

    specs = task_specs(list(ctx.attr.tasks), f"eval_harness {ctx.label}")
    request = normalize(ctx.attr.resources or None)
    package_dir = ctx.workspace / ctx.package if ctx.package else ctx.workspace
    task_files = {os.path.relpath(path, package_dir): path for path in ctx.attr.task_files}
    tokenizer = trained_tokenizer(ctx.attr.model)
    payload = {
        "output_path": ctx.output_path,
        "model_path": ctx.attr.model,
        "tasks": specs,
        "task_files": task_files,
        "max_examples": ctx.attr.max_examples,
        "batch_size": ctx.attr.batch_size,
        "require_accelerator": request is not None and (request.wants_tpu or bool(request.gpu)),
        "distributed": False,  # one host; on a multi-host slice each host's process gets its own
    }
    # Registry tasks fetch their data from the Hub; local tasks with a local tokenizer never need it.
    local_only = bool(task_files) and all(is_local_task(spec["task"], task_files) for spec in specs)
    offline = local_only and ("://" in tokenizer or os.path.isdir(tokenizer))
    return slices.run_job(ctx, EVAL_HARNESS, payload, log_name="eval_harness", offline=offline)


def is_local_task(name: str, task_files: dict[str, str]) -> bool:
    """Whether one of the task YAMLs declares ``task: name`` (a plain text check; lm-eval parses them for real)."""
    for path in task_files.values():
        if path.endswith((".yaml", ".yml")):
            with open(path) as f:
                if any(line.split("#")[0].strip() in (f"task: {name}", f'task: "{name}"') for line in f):
                    return True
    return False


eval_harness = rule(
    implementation=_eval_harness_impl,
    attrs={
        "model": attr.label(mandatory=True, doc="a train_lm target (its latest checkpoint is evaluated)"),
        "tasks": attr.list(mandatory=True, doc="lm-eval tasks: names or {task, num_fewshot, task_alias} dicts"),
        "task_files": attr.source_files(doc="lm-eval task YAMLs of this package and their data; content-hashed"),
        "max_examples": attr.int(default=0, doc="evaluate at most this many documents per task (0: all)"),
        "batch_size": attr.int(default=8, doc="sequences per evaluation batch"),
        **slices.job_attrs("the evaluation code"),
    },
    doc="Scores of a trained model's latest checkpoint on lm-eval-harness tasks (levanter's lm-eval integration).",
)
