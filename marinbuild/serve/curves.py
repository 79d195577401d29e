"""The training page: loss curves and key settings of ``train_lm``-shaped outputs whose ``metrics.jsonl`` has training
losses, by the report rule's code (``marinbuild.ml.report``: one value per step, a resumed run's later value winning).
The validation curve is the overall ``eval/loss``, else the first dataset's."""

from __future__ import annotations

from typing import Any

from marinbuild.serve.facts import relative
from marinbuild.store import fs


def training_runs(prefix: str, outputs: list[str]) -> list[dict[str, Any]]:
    from marinbuild.ml.report import collect, key_settings, settings_line  # lazy: fsspec

    runs = []
    for output in outputs:
        if not fs.exists(fs.join(output, "metrics.jsonl")):
            continue
        metrics = collect(output, [])
        if not metrics["train_loss"]:
            continue
        settings = key_settings(output, metrics.get("parameter_count"))
        runs.append(
            {
                "output_path": output,
                "relative": relative(prefix, output),
                "name": metrics["model"],
                "settings": settings,
                "settings_line": settings_line(settings),
                "train_loss": metrics["train_loss"],
                "validation_loss": metrics["overall_validation_loss"]
                or next(iter(metrics["validation_loss"].values()), []),
            }
        )
    return runs
