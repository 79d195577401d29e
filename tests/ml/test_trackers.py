"""``train_lm``'s ``tracker = "tensorboard"``: the tiny quickstart model trained on the CPU for real, its
TensorBoard event files read back with TensorBoard's own reader and compared with ``metrics.jsonl``.

The run is a workspace of its own (a tracker is not versioned, so the shared quickstart's trained
model would be reused, not retrained); it builds only up to ``:lm``.
"""

from __future__ import annotations

import json

import pytest
from qs_workspace import make_workspace, needs_levanter

pytestmark = [needs_levanter, pytest.mark.timeout(1200)]


def test_tensorboard_tracker_writes_the_loss(tmp_path):
    pytest.importorskip("tensorboardX", reason="tensorboardX is not installed (the ml extra)")
    accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="tensorboard (the reader) is not installed (the dev extra)",
    )
    ws = make_workspace(tmp_path / "ws")
    ws.edit_build("    seed = 0,\n", '    seed = 0,\n    tracker = "tensorboard",\n')
    build = ws.build("//experiments/quickstart:lm")
    assert build.code == 0, build.stderr[-5000:]
    lm = ws.output("lm")
    runs = [p for p in (lm / "tensorboard").iterdir() if p.is_dir()]
    assert [p.name for p in runs] == [lm.name]  # tensorboard/<run id>/, the run id being the output's name
    assert list(runs[0].glob("events.out.tfevents.*"))
    events = accumulator.EventAccumulator(str(runs[0]), size_guidance={accumulator.SCALARS: 0})
    events.Reload()
    assert "train/loss" in events.Tags()["scalars"]
    from_tensorboard = {e.step: e.value for e in events.Scalars("train/loss")}
    records = [json.loads(line) for line in (lm / "metrics.jsonl").read_text().splitlines()]
    from_json = {r["step"]: r["train/loss"] for r in records if "train/loss" in r}
    assert len(from_tensorboard) >= 20 and set(from_tensorboard) == set(from_json)
    for step, loss in from_json.items():
        assert from_tensorboard[step] == pytest.approx(loss, rel=1e-5)
    assert "eval/stories_tokenized/loss" in events.Tags()["scalars"]
