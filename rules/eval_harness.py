"""``eval_harness``: a trained model's scores on lm-eval-harness tasks, through levanter's lm-eval integration.

The tasks, ``max_examples``, ``batch_size``, the model and the content of ``task_files`` (lm-eval task YAMLs and their
data, relative to the package, so a task runs offline) are the version. The output is ``results.json`` and
``lm_eval_output.json`` (``marinbuild.ml.eval_harness``). An unknown task name fails the step at once. ``resources``,
``slice_wait`` and the retry budgets mean what they mean for ``train_lm`` (a restarted evaluation starts over).
Generation tasks are single-host only in levanter."""

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
    from marinbuild.ml.evaluate import trained_model
    from marinbuild.ml.slice_run import EVAL_HARNESS

    specs = task_specs(list(ctx.attr.tasks), f"eval_harness {ctx.label}")
    request = normalize(ctx.attr.resources or None)
    package_dir = ctx.workspace / ctx.package if ctx.package else ctx.workspace
    task_files = {os.path.relpath(path, package_dir): path for path in ctx.attr.task_files}
    tokenizer = trained_model(ctx.attr.model)["tokenizer"]
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
    offline = slices.offline(tokenizer, specs, task_files)
    return slices.run_job(ctx, EVAL_HARNESS, payload, log_name="eval_harness", offline=offline)


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
