"""The ML rules build on a real Ray cluster: the quickstart (tests/ml's workspace) at toy size, from the CLI.

Every step (raw data, tokenizer training, tokenization, a levanter training run, its evaluation and
the report) runs in a Ray task on the session's cluster; the training asks for the 2 CPUs only the
head node has. The run is cut to 4 training steps so the test adds little to the suite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ml.qs_workspace import HAVE_LEVANTER, STEPS, make_workspace
from raycluster import node_env

pytestmark = [
    pytest.mark.ml,
    pytest.mark.timeout(600),  # trains (tests/ray marks it ray)
    pytest.mark.skipif(not HAVE_LEVANTER, reason="levanter is not installed (the ml extra)"),
]

TINIER = [
    ('"num_train_steps": 30,', '"num_train_steps": 4,'),
    ('"checkpoint_every": 10,', '"checkpoint_every": 4,'),
    ('"steps_per_eval": 10,', '"steps_per_eval": 4,'),
]


def test_the_quickstart_builds_on_a_ray_cluster(ray_cluster, tmp_path):
    ws = make_workspace(tmp_path / "qs")
    for old, new in TINIER:
        ws.edit_build(old, new)
    env = node_env()
    env.pop("MARIN_PREFIX", None)
    ws.extra_env.update(env, RAY_ADDRESS=ray_cluster.address)
    build = ws.build("--backend", "ray", "//experiments/quickstart:all", timeout=540)
    assert build.code == 0, build.stderr[-5000:]
    assert build.ran == STEPS
    summary = json.loads((ws.output("lm") / "summary.json").read_text())
    assert summary["last_step"] == 3 and Path(summary["checkpoint"]).is_dir()
    evaluation = json.loads((ws.output("eval") / "eval.json").read_text())
    assert evaluation["step"] == 3 and evaluation["datasets"]["stories_tokenized"]["loss"] > 0
    assert (ws.output("report") / "loss.png").stat().st_size > 0
    assert json.loads((ws.output("story_tasks") / "results.json").read_text())["step"] == 3
