"""``marinbuild serve`` over the real quickstart: its graph, and the training curves of real ``train_lm`` runs.

After ``test_quickstart.py`` (same session) the prefix holds two trainings (the learning-rate change); alone,
one. Either way each run's curve is its ``metrics.jsonl`` and its legend its own config's key settings.
"""

from __future__ import annotations

import json

import pytest
from qs_workspace import needs_levanter
from serve_ws import Server

pytestmark = [needs_levanter, pytest.mark.timeout(1200)]


def test_serve_shows_the_quickstart_and_its_training_runs(built_quickstart) -> None:
    ws, _ = built_quickstart
    server = Server(ws.root, "//experiments/quickstart:all")
    try:
        nodes = server.json("/api/graph")["nodes"]
        assert len(nodes) == 8 and {n["state"] for n in nodes} == {"built"}
        trainings = sorted(
            p
            for p in (ws.prefix / "experiments" / "quickstart").glob("lm-*")
            if "SUCCESS" in (p / ".executor_status").read_text()
        )
        relative = [str(p.relative_to(ws.prefix)) for p in trainings]
        shown = server.json("/api/training?" + "&".join(f"path={r}" for r in relative))["runs"]
        assert [r["relative"] for r in shown] == relative
        for run, folder in zip(shown, trainings, strict=True):
            attrs = json.loads((folder / ".executor_info").read_text())["config"]["attrs"]
            settings = run["settings"]
            assert settings["learning_rate"] == attrs["optimizer"]["learning_rate"]
            assert settings["batch_size"] == attrs["trainer"]["batch_size"] and settings["steps"] == 30
            assert settings["model"].startswith("llama ") and settings["parameters"] > 50_000
            assert f"lr {settings['learning_rate']:g}" in run["settings_line"]
            records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
            by_step = {
                r["step"]: r["train/loss"] for r in records if "train/loss" in r
            }  # a step logged twice: the last
            assert run["train_loss"] == [[step, by_step[step]] for step in sorted(by_step)]
            assert run["validation_loss"]
        default = server.json("/api/training")["runs"]  # the graph's own training only
        assert [r["name"].rsplit("-", 1)[0] for r in default] == ["lm"]
    finally:
        server.stop()
