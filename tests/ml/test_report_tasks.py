"""The report shows eval_harness scores: a ``task_scores`` entry in ``metrics.json`` and a panel of bars
beside the loss plot, drawn from an ``eval_harness`` output's ``results.json`` as that rule writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from marinbuild.ml.report import build_report  # noqa: E402


def _outputs(root: Path) -> tuple[Path, Path]:
    train = root / "lm-abc123"
    train.mkdir(parents=True)
    (train / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "train/loss": 5.0 - s / 10}) + "\n" for s in range(30))
    )
    harness = root / "story_tasks-def456"
    harness.mkdir()
    result = {
        "checkpoint": str(train / "checkpoints" / "step-29"),
        "step": 29,
        "tasks": [{"task": "quickstart_story_object", "num_fewshot": 0, "task_alias": "story_0shot"}],
        "results": {"story_0shot": {"acc": 0.65, "acc_norm": 0.6}, "lambada": {"perplexity": 41.0}},
        "averages": {},
        "n_samples": {"story_0shot": 20, "lambada": 10},
    }
    (harness / "results.json").write_text(json.dumps(result))
    return train, harness


def test_task_scores_are_in_the_metrics_and_the_plot(tmp_path: Path) -> None:
    from PIL import Image

    train, harness = _outputs(tmp_path)
    build_report(str(train), [], str(tmp_path / "plain"))
    build_report(str(train), [str(harness)], str(tmp_path / "with_tasks"))
    metrics = json.loads((tmp_path / "with_tasks" / "metrics.json").read_text())
    assert metrics["task_scores"] == {
        "story_0shot": {"metric": "acc", "value": 0.65, "step": 29, "evaluation": "story_tasks"},
        "lambada": {"metric": "perplexity", "value": 41.0, "step": 29, "evaluation": "story_tasks"},
    }
    assert json.loads((tmp_path / "plain" / "metrics.json").read_text())["task_scores"] == {}
    with Image.open(tmp_path / "plain" / "loss.png") as plain, Image.open(tmp_path / "with_tasks" / "loss.png") as png:
        assert png.size[1] == plain.size[1] and png.size[0] > plain.size[0] * 1.4  # a second panel beside it
