"""The quickstart pipeline for real: tokenizer, tokenize, training on the CPU, eval, report; then rebuilds.

Order matters within this file (one shared workspace): the full build, then checks of what
it produced, the no-op rebuild, a learning-rate change and a data change, each measured by
which steps ran according to the build-event file.
"""

from __future__ import annotations

import json
import math

import pytest
from qs_workspace import STEPS, needs_levanter

pytestmark = [needs_levanter, pytest.mark.timeout(1200)]


def test_full_build_trains_and_reports(built_quickstart):
    ws, build = built_quickstart
    assert build.ran == STEPS
    # the tokenizer: a directory levanter can load, with the special tokens
    tok = ws.output("tokenizer")
    config = json.loads((tok / "tokenizer_config.json").read_text())
    assert (tok / "tokenizer.json").is_file()
    assert (config["bos_token"], config["eos_token"], config["pad_token"]) == (
        "<|begin_of_text|>",
        "<|end_of_text|>",
        "<|pad|>",
    )
    # training: checkpoints, metrics, and a loss that fell a lot
    lm = ws.output("lm")
    steps = sorted(int(p.name.split("-")[1]) for p in (lm / "checkpoints").glob("step-*"))
    assert steps[-1] == 29 and 10 in steps and 20 in steps
    records = [json.loads(line) for line in (lm / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/loss"] for r in records if "train/loss" in r]
    assert len(losses) >= 20
    assert losses[-1] < 0.6 * losses[0], losses
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5
    evals = [r["eval/stories_tokenized/loss"] for r in records if "eval/stories_tokenized/loss" in r]
    assert len(evals) >= 2 and evals[-1] < evals[0]
    summary = json.loads((lm / "summary.json").read_text())
    assert summary["last_step"] == 29
    assert 50_000 <= summary["parameter_count"] <= 1_000_000
    runs = [json.loads(line) for line in (lm / "runs.jsonl").read_text().splitlines()]
    assert runs == [runs[0]] and runs[0]["start_step"] == 0
    # evaluation: loss and perplexity of the last checkpoint
    result = json.loads((ws.output("eval") / "eval.json").read_text())
    assert result["step"] == 29
    entry = result["datasets"]["stories_tokenized"]
    assert math.isclose(entry["perplexity"], math.exp(entry["loss"]), rel_tol=1e-6)
    assert entry["loss"] < losses[0]
    # the report: a PNG and the metrics it was drawn from
    report = ws.output("report")
    assert (report / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    metrics = json.loads((report / "metrics.json").read_text())
    assert [s for s, _ in metrics["train_loss"]] == sorted({s for s, _ in metrics["train_loss"]})
    assert metrics["validation_loss"]["stories_tokenized"]
    assert metrics["evaluations"]["eval"]["loss"] == result["loss"]


def test_identical_rebuild_is_a_noop(built_quickstart):
    ws, _ = built_quickstart
    build = ws.build()
    assert build.code == 0, build.stderr
    assert build.ran == set()
    assert build.already_built == STEPS
    assert build.seconds < 10  # a second or so, plus Python start-up on a busy machine


def test_tokenized_cache_is_readable_by_levanter(built_quickstart):
    from levanter.data.text import TextLmDatasetFormat, load_lm_dataset_cache
    from levanter.tokenizers import load_tokenizer

    ws, _ = built_quickstart
    tokenized = ws.output("stories_tokenized")
    meta = json.loads((tokenized / "tokenized.json").read_text())
    assert meta["splits"]["train"]["documents"] == 1800
    assert meta["splits"]["validation"]["documents"] == 200
    tokenizer = load_tokenizer(str(ws.output("tokenizer")))
    cache = load_lm_dataset_cache(str(tokenized / "validation"), TextLmDatasetFormat(), tokenizer)
    dataset = cache.as_sync_dataset()
    assert len(dataset) == 200
    first = dataset[0]["input_ids"].tolist()
    assert first[0] == tokenizer.bos_token_id and first[-1] == tokenizer.eos_token_id
    expected = json.loads((ws.package / "data" / "validation.jsonl").read_text().splitlines()[0])["text"]
    assert tokenizer.decode(first[1:-1]).strip() == expected
    assert sum(len(dataset[i]["input_ids"]) for i in range(len(dataset))) == meta["splits"]["validation"]["tokens"]


def test_learning_rate_change_reruns_training_evals_report_only(built_quickstart):
    ws, _ = built_quickstart
    ws.edit_build('"learning_rate": 3e-3,', '"learning_rate": 2e-3,')
    why = ws.marinbuild("why", "//experiments/quickstart:lm")
    assert "config.attrs.optimizer.learning_rate: 0.003 -> 0.002" in why.stdout, why.stdout + why.stderr
    build = ws.build()
    assert build.code == 0, build.stderr[-5000:]
    assert build.ran == {
        "experiments/quickstart/lm",
        "experiments/quickstart/eval",
        "experiments/quickstart/story_tasks",
        "experiments/quickstart/report",
    }


def test_data_file_change_reruns_what_reads_it_and_nothing_else(built_quickstart):
    ws, _ = built_quickstart
    # A training shard feeds everything but the validation data: a dry run says so (and runs nothing).
    shard = ws.package / "data" / "train-00003.jsonl.gz"
    original = shard.read_bytes()
    import gzip

    shard.write_bytes(gzip.compress(gzip.decompress(original) + b'{"id": "extra", "text": "One more story."}\n'))
    dry = ws.marinbuild("-n", "//experiments/quickstart:all", "--output", "json")
    assert dry.returncode == 0, dry.stderr
    plan = {p["step"]: p["state"] for p in json.loads(dry.stdout)["plan"]}
    assert {s for s, state in plan.items() if state != "built"} == STEPS - {"experiments/quickstart/stories_validation"}
    shard.write_bytes(original)
    # The validation file feeds validation, tokenize, train, the evaluations and report, but not the tokenizer.
    validation = ws.package / "data" / "validation.jsonl"
    lines = validation.read_text().splitlines(keepends=True)
    validation.write_text("".join(lines[:-1]))  # drop one held-out story
    build = ws.build()
    assert build.code == 0, build.stderr[-5000:]
    assert build.ran == STEPS - {"experiments/quickstart/stories_train", "experiments/quickstart/tokenizer"}
    meta = json.loads((ws.output("stories_tokenized") / "tokenized.json").read_text())
    assert meta["splits"]["validation"]["documents"] == 199
