"""The report's plot names the run's key settings (model size, learning rate, batch, steps), read from a real
train_lm output's files, so two plots can be told apart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from marinbuild.ml.report import build_report  # noqa: E402


def _train_output(root: Path, lr: float, batch: int) -> Path:
    out = root / f"lm-{batch:06d}"
    out.mkdir(parents=True)
    (out / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "train/loss": 5.0 - s / 10}) + "\n" for s in range(30))
    )
    (out / "summary.json").write_text(json.dumps({"parameter_count": 1_234_567, "last_step": 29}))
    info = {
        "name": "experiments/lm",
        "config": {
            "attrs": {
                "model": {"type": "llama", "seq_len": 128, "hidden_dim": 64, "num_layers": 2},
                "optimizer": {"learning_rate": lr},
                "trainer": {"batch_size": batch, "num_train_steps": 30},
            }
        },
    }
    (out / ".executor_info").write_text(json.dumps(info))
    return out


def test_the_plot_and_metrics_carry_the_key_settings(tmp_path: Path) -> None:
    from PIL import Image

    titles = []
    for lr, batch in ((3e-3, 32), (1e-3, 64)):
        train = _train_output(tmp_path / "runs", lr, batch)
        report = tmp_path / f"report-{batch}"
        build_report(str(train), [], str(report))
        metrics = json.loads((report / "metrics.json").read_text())
        assert metrics["settings"] == {
            "model": "llama 2x64",
            "parameters": 1_234_567,
            "learning_rate": lr,
            "batch_size": batch,
            "steps": 30,
            "seq_len": 128,
        }
        with Image.open(report / "loss.png") as png:
            titles.append(png.text["Title"])
    assert titles[0].endswith("llama 2x64, 1.2M parameters, lr 0.003, batch 32, 30 steps, seq 128")
    assert "lr 0.001, batch 64" in titles[1]
    assert titles[0] != titles[1]
