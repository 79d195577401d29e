"""``eval_lm``: loss and perplexity of a trained model on tokenized validation sets.

    eval_lm(name = "eval", model = ":lm", data = [":stories_tokenized"])

``model`` is a ``train_lm`` target, ``data`` ``tokenize`` targets with a validation split; the output is ``eval.json``
(``marinbuild.ml.evaluate``). Named ``evaluate.py`` so it never shadows the builtin ``eval``."""

from __future__ import annotations

import os
from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule

from . import slices


def _eval_lm_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.core.resources import normalize
    from marinbuild.ml.evaluate import trained_model
    from marinbuild.ml.process import run_child

    datasets = slices.tokenized(list(ctx.attr.data), f"eval_lm {ctx.label}", "validation")
    request = normalize(ctx.attr.resources or None)
    tokenizer = trained_model(ctx.attr.model)["tokenizer"]
    payload = {
        "output_path": ctx.output_path,
        "model_path": ctx.attr.model,
        "datasets": {name: path for name, (path, _) in datasets.items()},
        "text_keys": {name: meta.get("text_key", "text") for name, (_, meta) in datasets.items()},
        "max_eval_batches": ctx.attr.max_eval_batches,
        "batch_size": ctx.attr.batch_size,
        "require_accelerator": request is not None and (request.wants_tpu or bool(request.gpu)),
    }
    return run_child(
        "marinbuild.ml.evaluate",
        payload,
        log_dir=os.path.join(ctx.output_path, "logs"),
        name="eval",
        offline=slices.offline(tokenizer, [], {}),
    )


eval_lm = rule(
    implementation=_eval_lm_impl,
    attrs={
        "model": attr.label(mandatory=True, doc="a train_lm target"),
        "data": attr.label_list(mandatory=True, doc="tokenize targets whose validation splits are evaluated"),
        "max_eval_batches": attr.int(default=0, doc="evaluate at most this many batches per dataset (0: all)"),
        "batch_size": attr.int(default=8, doc="sequences per evaluation batch"),
        "resources": attr.dict(versioned=False, doc="what the step asks the backend for"),
    },
    doc="Loss and perplexity of a trained model's latest checkpoint on tokenized validation sets.",
)
