"""``report``: a metrics JSON and a PNG plot of training and validation loss per step.

    report(name = "report", model = ":lm", evals = [":eval"])

``model`` is a ``train_lm`` target, ``evals`` its ``eval_lm`` and ``eval_harness`` targets (``marinbuild.ml.report``;
matplotlib runs in this process)."""

from __future__ import annotations

from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule


def _report_impl(ctx: RuleContext) -> dict[str, Any]:
    from marinbuild.ml.report import build_report

    return build_report(ctx.attr.model, list(ctx.attr.evals), ctx.output_path, title=ctx.attr.title)


report = rule(
    implementation=_report_impl,
    attrs={
        "model": attr.label(mandatory=True, doc="a train_lm target"),
        "evals": attr.label_list(doc="eval_lm and eval_harness targets of that model"),
        "title": attr.string(doc="the plot's title (default: the model's output name)"),
    },
    doc="A metrics JSON and a PNG plot of training and validation loss per step (matplotlib).",
)
