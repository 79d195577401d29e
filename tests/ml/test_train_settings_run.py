"""One tiny real training of the quickstart with Marin's settings: WSD-S cycles, z-loss, task evals, HF exports.

The quickstart's ``lm`` (30 steps here) trains with two linear-decay cycles of 15 steps
(``cycle_length``, ``decay`` in steps, ``rewarmup``), a z-loss, the quickstart's local lm-eval
task every 15 steps and an HF export every 15 steps. The learning rates it logged are levanter's
schedule for those settings, the task's scores are in ``metrics.jsonl`` at steps 15 and 29 (the
last), and the exports are in ``hf/step-15/`` and ``hf/step-29/`` of the output, loadable with
``transformers``. Its mixture is given in stages (``data_steps``), so that form goes through the
rule and levanter too; the weights of each stage are checked in ``test_train_settings.py``.
"""

from __future__ import annotations

import json
import re

import pytest
from qs_workspace import needs_levanter

pytestmark = [needs_levanter, pytest.mark.timeout(1200)]

OPTIMIZER = {
    "learning_rate": 3e-3,
    "weight_decay": 0.1,
    "warmup": 3,
    "cycle_length": 15,
    "decay": 5,
    "rewarmup": 2,
    "min_lr_ratio": 0.1,
    "lr_schedule": "linear",
}
EDITS = [
    # a mixture given by stages (its one component's weight is the same in both; the change at step 128,
    # sequence 2048, lies past this short run): the rule and levanter take the list form
    (
        '    data = {":stories_tokenized": 1.0},\n',
        '    data = {":stories_tokenized": [1.0, 1.0]},\n    data_steps = [0, 128],\n',
    ),
    (
        '"warmup": 0.1,\n        "lr_schedule": "cosine",',
        '"warmup": 3,\n        "lr_schedule": "linear",\n        "cycle_length": 15,\n        "decay": 5,\n'
        '        "rewarmup": 2,\n        "min_lr_ratio": 0.1,',
    ),
    (
        '"steps_per_eval": 10,',
        '"steps_per_eval": 10,\n        "z_loss_weight": 1e-4,\n        "steps_per_task_eval": 15,\n'
        '        "steps_per_hf_export": 15,',
    ),
    (
        "    seed = 0,\n",
        '    seed = 0,\n    task_evals = [{"task": "quickstart_story_object", "task_alias": "story"}],\n'
        '    task_files = ["tasks/story_object.yaml", "tasks/story_object.jsonl"],\n',
    ),
]


def test_wsd_s_z_loss_task_evals_and_hf_exports(quickstart):
    ws = quickstart
    build_file = ws.package / "BUILD.marin"
    original = build_file.read_text()
    # The learning rate is set here: tests sharing the quickstart may have changed it.
    build_file.write_text(
        re.sub(r'"learning_rate": [0-9.e-]+,', f'"learning_rate": {OPTIMIZER["learning_rate"]},', original)
    )
    for old, new in EDITS:
        ws.edit_build(old, new)
    try:
        build = ws.build("//experiments/quickstart:lm")
    finally:
        build_file.write_text(original)
    assert build.code == 0, build.stderr[-5000:]
    lm = ws.output("lm")
    records = [json.loads(line) for line in (lm / "metrics.jsonl").read_text().splitlines()]

    from marinbuild.ml.configs import Optimizer, to_levanter_optimizer

    schedule = to_levanter_optimizer(Optimizer(**OPTIMIZER)).lr_scheduler(30)
    logged = {r["step"]: r["optim/learning_rate"] for r in records if "optim/learning_rate" in r}
    assert len(logged) >= 20
    for step, rate in logged.items():
        assert rate == pytest.approx(float(schedule(step)), rel=1e-4), step
    assert logged[9] == pytest.approx(3e-3) and logged[14] < 1e-3  # the first cycle's peak, then its decay

    # every 15 steps and at the last step (29: steps count from 0), as levanter's hooks run
    tasks = {r["step"]: r for r in records if any(k.startswith("lm_eval/story/") for k in r)}
    assert sorted(tasks) == [15, 29]
    assert tasks[29]["lm_eval/story/sample_len"] == 20 and 0.0 <= tasks[29]["lm_eval/story/acc"] <= 1.0

    exports = sorted(p.name for p in (lm / "hf").iterdir())
    assert exports == ["step-15", "step-29"]
    import transformers

    export = lm / "hf" / "step-29"
    config = transformers.AutoConfig.from_pretrained(export)
    assert (config.model_type, config.hidden_size, config.num_hidden_layers) == ("llama", 64, 2)
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    model = transformers.FlaxLlamaForCausalLM.from_pretrained(export)  # no torch in the ml extra: JAX
    ids = tokenizer("the cat sat on the mat", return_tensors="np")["input_ids"]
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], 512)
