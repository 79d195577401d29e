"""Loss and perplexity of a trained checkpoint on validation sets (the child process of ``eval_lm``).

Evaluates a ``train_lm`` output's latest checkpoint with ``levanter.main.eval_lm`` on each tokenized dataset's
validation split and writes ``<out>/eval.json``: ``checkpoint``, ``step``, ``datasets`` (per dataset ``loss``,
``perplexity``, ``bpb``), and levanter's overall token-weighted ``loss`` with ``perplexity = exp(loss)``."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import fsspec

from marinbuild.ml.configs import LmModel, from_dict, to_levanter_model
from marinbuild.ml.jsonl import read_records
from marinbuild.ml.process import child_main, say
from marinbuild.ml.tokenizer import resolve_tokenizer
from marinbuild.ml.train_config import MODEL_INFO, compilation_cache_dir, data_config, latest_checkpoint

RESULT = "eval.json"


def run(payload: dict[str, Any]) -> dict[str, Any]:
    import jmp
    from levanter.distributed import DistributedConfig
    from levanter.main import eval_lm
    from levanter.trainer import TrainerConfig

    from marinbuild.ml.tracker import JsonlTrackerConfig  # lazy: levanter

    out = payload["output_path"]
    train_out = payload["model_path"]
    with fsspec.open(os.path.join(train_out, MODEL_INFO), "r") as f:
        info = json.load(f)
    model = from_dict(LmModel, info["model"])
    tokenizer = resolve_tokenizer(info["tokenizer"])
    checkpoint, step = latest_checkpoint(os.path.join(train_out, "checkpoints"))
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint under {train_out}/checkpoints: has the model been trained?")
    say(f"evaluating {checkpoint} (step {step}) on {', '.join(payload['datasets'])}")
    metrics_path = os.path.join(out, "metrics.jsonl")
    batch = payload.get("batch_size") or 8
    config = eval_lm.EvalLmConfig(
        checkpoint_path=checkpoint,
        model=to_levanter_model(model, tokenizer),
        data=data_config(tokenizer, {}, {}, payload["text_keys"], payload["datasets"]),
        max_eval_length=info["seq_len"],
        trainer=TrainerConfig(
            id=os.path.basename(out.rstrip("/")),
            log_dir=Path(os.path.join(out, "logs") if "://" not in out else "logs"),
            tracker=(JsonlTrackerConfig(path=metrics_path),),
            mp=jmp.get_policy(info.get("mp", "p=f32")),
            train_batch_size=batch,
            per_device_eval_parallelism=-1,
            max_eval_batches=payload.get("max_eval_batches") or None,
            require_accelerator=bool(payload.get("require_accelerator")),
            distributed=DistributedConfig(initialize_jax_distributed=False),
            jax_compilation_cache_dir=compilation_cache_dir(),
            log_jaxprs=False,
            log_xla_hlo=False,
        ),
    )
    eval_lm.main(config)
    logged: dict[str, Any] = {}
    for record in read_records(metrics_path):
        logged.update(record)
    datasets = {}
    for name in payload["datasets"]:
        loss = logged.get(f"eval/{name}/loss")
        entry: dict[str, Any] = {"loss": loss, "perplexity": math.exp(loss) if loss is not None else None}
        if f"eval/{name}/bpb" in logged:
            entry["bpb"] = logged[f"eval/{name}/bpb"]
        datasets[name] = entry
    overall = logged.get("eval/loss")
    result = {
        "checkpoint": checkpoint,
        "step": step,
        "datasets": datasets,
        "loss": overall,
        "perplexity": math.exp(overall) if overall is not None else None,
    }
    with fsspec.open(os.path.join(out, RESULT), "w") as f:
        json.dump(result, f, indent=2)
    say(f"eval loss {overall:.4f}, perplexity {result['perplexity']:.3f}" if overall is not None else "no eval loss")
    return result


if __name__ == "__main__":
    child_main(run)
