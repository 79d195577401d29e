"""A two-phase hand-off, really trained: ``initialize_from = checkpoint(":phase1", step = 20)``.

One build asks for ``phase2`` (from phase1's checkpoint ``step-20``) and ``phase3`` (from ``step-25``, which
phase1 never keeps: it keeps every 10th step and its last, 29). The build runs phase1 as well, since the
checkpoints are not there; phase2 waits for ``step-20``, starts while phase1 trains on, and trains from step 21;
phase3 fails with one line once phase1 has finished without its checkpoint.
"""

from __future__ import annotations

import json
import re

import pytest
from qs_workspace import needs_levanter

pytestmark = [needs_levanter, pytest.mark.timeout(1200)]

Q = "experiments/quickstart"


def _phases(build_text: str) -> str:
    """phase1..3: the quickstart's ``lm`` with a seed of their own; phase2 and phase3 start from phase1."""
    lm = re.search(r'train_lm\(\n    name = "lm",\n.*?\n\)\n', build_text, re.S)
    assert lm is not None, "the quickstart's BUILD.marin has no train_lm named lm"
    block = lm.group(0).replace("seed = 0,", "seed = 11,")

    def phase(name: str, step: int | None) -> str:
        text = block.replace('name = "lm",', f'name = "{name}",')
        if step is not None:
            text = text.replace(
                "seed = 11,", f'seed = 11,\n    initialize_from = checkpoint(":phase1", step = {step}),'
            )
        return text

    return "\n" + phase("phase1", None) + "\n" + phase("phase2", 20) + "\n" + phase("phase3", 25)


def test_consumer_waits_for_the_checkpoint_then_trains_on_from_it(quickstart):
    ws = quickstart
    build_file = ws.package / "BUILD.marin"
    original = build_file.read_text()
    build_file.write_text(original + _phases(original))
    try:
        build = ws.build("--keep_going", f"//{Q}:phase2", f"//{Q}:phase3")
        assert build.code == 1, build.stderr[-5000:]  # phase3 fails, on purpose
        phase1, phase2 = ws.output("phase1"), ws.output("phase2")
        events = [e for e in build.events if e.get("step") in (f"{Q}/phase1", f"{Q}/phase2", f"{Q}/phase3")]
        when = {(e["kind"], e["step"]): e["time"] for e in events}

        # phase2 waited for phase1's step-20, started once it was there, before phase1 finished
        assert ("waiting", f"{Q}/phase2") in when
        checkpoint = phase1 / "checkpoints" / "step-20"
        assert when[("waiting", f"{Q}/phase2")] < (checkpoint / "metadata.json").stat().st_mtime
        assert (checkpoint / "metadata.json").stat().st_mtime <= when[("started", f"{Q}/phase2")]
        assert when[("started", f"{Q}/phase2")] < when[("succeeded", f"{Q}/phase1")]
        assert f"waiting for {Q}/phase2: checkpoint step-20 of {Q}/phase1" in build.stderr

        # ... and trained on from that checkpoint: its first step is 21
        runs = [json.loads(line) for line in (phase2 / "runs.jsonl").read_text().splitlines()]
        assert [(r["start_step"], r["checkpoint"]) for r in runs] == [(21, str(checkpoint))]
        records = [json.loads(line) for line in (phase2 / "metrics.jsonl").read_text().splitlines()]
        train_steps = [r["step"] for r in records if "train/loss" in r]
        assert train_steps[0] == 21 and train_steps[-1] == 29
        assert "Resuming training from step 21" in (phase2 / "logs" / "train.log").read_text()
        assert f"starting from another run's checkpoint {checkpoint}: step 20 done, going on at step 21" in build.stderr

        # phase3: one line naming the producer, the step asked for and the producer's last checkpoint
        line = (
            f"FAILED {Q}/phase3: MissingCheckpointError: starts from checkpoint step-25 of {Q}/phase1, "
            f"but {Q}/phase1 finished without it; its last checkpoint: step-29"
        )
        assert line in build.stderr
        assert ("started", f"{Q}/phase3") not in when
        assert not list((ws.prefix / Q).glob("phase3-*"))  # held back: nothing of it was written

        # phase1 trained on and finished after phase2 started from it: phase2 is not stale
        again = ws.build(f"//{Q}:phase2")
        assert again.code == 0 and again.ran == set(), again.stderr[-3000:]
    finally:
        build_file.write_text(original)
