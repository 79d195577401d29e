"""``train_lm``: train a language model with levanter on a weighted mixture of tokenized data (docs/ml-rules.md).

``model``, ``optimizer`` and ``trainer`` are dataclasses (``marinbuild.ml.configs``) written as dicts, under Marin's
names; unknown or mistyped fields are load errors. The mixture (targets' versions, weights, ``data_steps``), these
settings, ``task_evals`` and ``seed`` are the version; ``resources``, ``tracker``, ``initialize_from`` and the slice
settings are not. Multi-host slices run through ``marinbuild.ml.slice_run``; ``initialize_from = checkpoint(":phase1",
step = N)`` waits for that checkpoint (``marinbuild.run.handoff``). Training runs in a child process
(``marinbuild.ml.train``) and resumes from the latest checkpoint. levanter's trackio tracker is not offered: it needs
``huggingface_hub`` 1.x, which levanter's ``transformers`` pin refuses."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule
from marinbuild.load.attrs import AttrValueError
from marinbuild.ml.configs import LmModel, Optimizer, Trainer, config_attr, from_dict
from marinbuild.ml.mixture import MixtureWeightAttr, mixture_weights

from . import slices
from .eval_harness import task_specs


def _train_lm_impl(ctx: RuleContext) -> dict[str, Any]:
    from dataclasses import asdict

    from marinbuild.core.resources import normalize
    from marinbuild.ml.slice_run import TRAIN

    model: LmModel = from_dict(LmModel, ctx.attr.model)
    trainer: Trainer = from_dict(Trainer, ctx.attr.trainer)
    if trainer.seq_len is not None and trainer.seq_len > model.seq_len:
        raise ValueError(
            f"train_lm {ctx.label}: trainer.seq_len {trainer.seq_len} exceeds model.seq_len {model.seq_len}"
        )
    mixture: dict[str, Any] = dict(ctx.attr.data)
    weights = mixture_weights(mixture, list(ctx.attr.data_steps or ()))
    train = slices.tokenized(list(mixture), f"train_lm {ctx.label} data", "train")
    names = {path: name for name, (path, _) in train.items()}
    validation = slices.tokenized(list(ctx.attr.validation), f"train_lm {ctx.label} validation", "validation")
    # the mixture's own validation splits are evaluated already; other names must not clash with its names
    validation = {f"{k}_validation" if k in train else k: v for k, v in validation.items() if v[0] not in mixture}
    tokenizers = {meta["tokenizer"] for _, meta in [*train.values(), *validation.values()]}
    if len(tokenizers) != 1:
        raise ValueError(
            f"train_lm {ctx.label}: the data were tokenized with different tokenizers: {sorted(tokenizers)}"
        )
    tokenizer = tokenizers.pop()
    tasks = list(ctx.attr.task_evals or ())
    specs = task_specs(tasks, f"train_lm {ctx.label} task_evals") if tasks else []
    package_dir = ctx.workspace / ctx.package if ctx.package else ctx.workspace
    task_files = {os.path.relpath(path, package_dir): path for path in ctx.attr.task_files or ()}
    request = normalize(ctx.attr.resources or None)
    accelerated = request is not None and (request.wants_tpu or bool(request.gpu))
    payload = {
        "output_path": ctx.output_path,
        "run_id": os.path.basename(ctx.output_path.rstrip("/")),
        "components": {name: path for name, (path, _) in train.items()},
        "weights": (
            {names[path]: w for path, w in weights.items()}
            if isinstance(weights, dict)
            else [[step, {names[path]: w for path, w in stage.items()}] for step, stage in weights]
        ),
        "validation": {name: path for name, (path, _) in validation.items()},
        "text_keys": {name: meta.get("text_key", "text") for name, (_, meta) in [*train.items(), *validation.items()]},
        "tokenizer": tokenizer,
        "model": asdict(model),
        "optimizer": asdict(from_dict(Optimizer, ctx.attr.optimizer)),
        "trainer": asdict(trainer),
        "seed": ctx.attr.seed,
        "tracker": ctx.attr.tracker,
        "task_evals": specs,
        "task_files": task_files,
        "require_accelerator": accelerated,
        "initialize_from": ctx.attr.initialize_from,
        "distributed": False,  # one host; on a multi-host slice each host's process gets its own
    }
    offline = slices.offline(tokenizer, specs, task_files)
    return slices.run_job(ctx, TRAIN, payload, log_name="train", offline=offline)


def _check(values: Mapping[str, Any]) -> None:
    """The mixture's weights and steps and the task evaluations, as a load error at the attribute."""
    mixture_weights(values["data"], list(values.get("data_steps") or ()))
    tasks = list(values.get("task_evals") or ())
    if tasks:
        try:
            task_specs(tasks, "task_evals")
        except ValueError as exc:
            raise AttrValueError(str(exc), attr="task_evals") from None


train_lm = rule(
    implementation=_train_lm_impl,
    check=_check,  # the mixture's weights and steps: a load error at the attribute
    attrs={
        "data": attr.label_keyed_dict(
            value=MixtureWeightAttr(),
            mandatory=True,
            doc="the training mixture: tokenize targets -> weights (with data_steps: a list, one per step)",
        ),
        "data_steps": attr.list(
            of=int, doc="steps at which the mixture's weights change, from 0: each weight in data holds from its step"
        ),
        "validation": attr.label_list(doc="more tokenize targets whose validation splits are evaluated in training"),
        "model": config_attr(LmModel, mandatory=True, doc="the model (marinbuild.ml.configs.LmModel)"),
        "optimizer": config_attr(Optimizer, default={}, doc="optimizer and schedule (configs.Optimizer)"),
        "trainer": config_attr(Trainer, mandatory=True, doc="batch size, steps, checkpoints (configs.Trainer)"),
        "seed": attr.int(default=0, doc="random seed of initialisation and data order"),
        # Unversioned: left out it adds nothing to the version; given, its DEP path and its target's version do.
        "initialize_from": attr.checkpoint(
            versioned=False, doc='checkpoint(":phase1", step = N): go on from that checkpoint (step N + 1)'
        ),
        "tracker": attr.string(
            default="json",
            values=["json", "wandb", "tensorboard"],
            versioned=False,
            doc="json: metrics.jsonl only; wandb: Weights & Biases as well; "
            "tensorboard: TensorBoard event files under tensorboard/ as well",
        ),
        "task_evals": attr.list(
            doc="lm-eval tasks evaluated every trainer.steps_per_task_eval steps while training (levanter's "
            "eval-harness callback): names or {task, num_fewshot, task_alias} dicts, as eval_harness takes them"
        ),
        "task_files": attr.source_files(doc="lm-eval task YAMLs of this package and their data; content-hashed"),
        "override_output_path": attr.string(
            versioned=False, doc="the output folder, relative to the prefix or absolute (Marin's override_output_path)"
        ),
        **slices.job_attrs("the training code"),
    },
    doc="A language model trained with levanter on a weighted mixture of tokenized data.",
)
