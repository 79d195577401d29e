"""Loss and perplexity of a trained checkpoint on validation sets (the child process of ``eval_lm``).

Evaluates a ``train_lm`` output's latest checkpoint with ``levanter.main.eval_lm`` on each tokenized dataset's
validation split and writes ``<out>/eval.json``: ``checkpoint``, ``step``, ``datasets`` (per dataset ``loss``,
``perplexity``, ``bpb``), and levanter's overall token-weighted ``loss`` with ``perplexity = exp(loss)``. What every
evaluation of a ``train_lm`` output reads and runs with is here too (``trained_model``, ``eval_trainer``)."""

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


def trained_model(model_path: str) -> dict[str, Any]:
    """A ``train_lm`` output's ``model.json``: its model, tokenizer, ``seq_len`` and ``mp``."""
    try:
        with fsspec.open(os.path.join(model_path, MODEL_INFO), "r") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{model_path} has no {MODEL_INFO}: is it the output of a train_lm target?") from None


def trained_checkpoint(model_path: str) -> tuple[str, int]:
    """(path, step) of the latest checkpoint of a ``train_lm`` output."""
    checkpoint, step = latest_checkpoint(os.path.join(model_path, "checkpoints"))
    if checkpoint is None:
        raise FileNotFoundError(f"no checkpoint under {model_path}/checkpoints: has the model been trained?")
    return checkpoint, step


def eval_trainer(payload: dict[str, Any], info: dict[str, Any], log_dir: str, **options: Any) -> Any:
    """levanter's ``TrainerConfig`` of an evaluation (JAX distributed started already, if at all); ``options``: more
    fields of it."""
    import jmp
    from levanter.distributed import DistributedConfig
    from levanter.trainer import TrainerConfig

    return TrainerConfig(
        id=os.path.basename(payload["output_path"].rstrip("/")),
        log_dir=Path(log_dir),
        mp=jmp.get_policy(info.get("mp", "p=f32")),
        train_batch_size=payload.get("batch_size") or 8,
        per_device_eval_parallelism=-1,
        require_accelerator=bool(payload.get("require_accelerator")),
        distributed=DistributedConfig(initialize_jax_distributed=False),
        jax_compilation_cache_dir=compilation_cache_dir(),
        log_jaxprs=False,
        log_xla_hlo=False,
        **options,
    )


def run(payload: dict[str, Any]) -> dict[str, Any]:
    from levanter.main import eval_lm

    from marinbuild.ml.tracker import JsonlTrackerConfig  # lazy: levanter

    out = payload["output_path"]
    info = trained_model(payload["model_path"])
    tokenizer = resolve_tokenizer(info["tokenizer"])
    checkpoint, step = trained_checkpoint(payload["model_path"])
    say(f"evaluating {checkpoint} (step {step}) on {', '.join(payload['datasets'])}")
    metrics_path = os.path.join(out, "metrics.jsonl")
    config = eval_lm.EvalLmConfig(
        checkpoint_path=checkpoint,
        model=to_levanter_model(from_dict(LmModel, info["model"]), tokenizer),
        data=data_config(tokenizer, {}, {}, payload["text_keys"], payload["datasets"]),
        max_eval_length=info["seq_len"],
        trainer=eval_trainer(
            payload,
            info,
            os.path.join(out, "logs") if "://" not in out else "logs",
            tracker=(JsonlTrackerConfig(path=metrics_path),),
            max_eval_batches=payload.get("max_eval_batches") or None,
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
