"""``eval_lm``: loss and perplexity of a trained model on tokenized validation sets.

    eval_lm(name = "eval", model = ":lm", data = [":stories_tokenized"])

``model`` is a ``train_lm`` target, ``data`` ``tokenize`` targets with a validation split; the output is ``eval.json``
(``marinbuild.ml.evaluate``). Named ``evaluate.py`` so it never shadows the builtin ``eval``."""

from __future__ import annotations

import os
from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule


def _eval_lm_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.core.resources import normalize
    from marinbuild.ml.eval_harness import trained_tokenizer
    from marinbuild.ml.process import run_child
    from marinbuild.ml.tokenize import read_metadata

    datasets: dict[str, str] = {}
    text_keys: dict[str, str] = {}
    for path in ctx.attr.data:
        meta = read_metadata(path)
        if "validation" not in meta.get("splits", {}):
            raise ValueError(f"eval_lm {ctx.label}: {path} has no validation split")
        base = meta.get("name") or os.path.basename(path.rstrip("/"))
        name, n = base, 2
        while name in datasets:
            name, n = f"{base}_{n}", n + 1
        datasets[name] = path
        text_keys[name] = meta.get("text_key", "text")
    request = normalize(ctx.attr.resources or None)
    tokenizer = trained_tokenizer(ctx.attr.model)
    payload = {
        "output_path": ctx.output_path,
        "model_path": ctx.attr.model,
        "datasets": datasets,
        "text_keys": text_keys,
        "max_eval_batches": ctx.attr.max_eval_batches,
        "batch_size": ctx.attr.batch_size,
        "require_accelerator": request is not None and (request.wants_tpu or bool(request.gpu)),
    }
    return run_child(
        "marinbuild.ml.evaluate",
        payload,
        log_dir=os.path.join(ctx.output_path, "logs"),
        name="eval",
        offline="://" in tokenizer or os.path.isdir(tokenizer),
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
