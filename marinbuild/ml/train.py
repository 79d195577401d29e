"""Train a language model with levanter (the child process of the ``train_lm`` rule).

Builds levanter's ``TrainLmConfig`` from the payload (``marinbuild.ml.train_config``) and runs
``levanter.main.train_lm.main``. Under the output folder (docs/ml-rules.md): ``checkpoints/step-N/``, ``metrics.jsonl``,
``runs.jsonl`` (one line per start; checkpoint step-N holds the state after step N, so a resumed run starts at N + 1),
``model.json`` (what eval_lm needs to rebuild the model), ``summary.json``, ``logs/``, ``tensorboard/RUN/`` and
``hf/step-N/``.

On a multi-host slice this runs once per host, one JAX distributed job (``marinbuild.ml.distributed``). Process 0 alone
writes ``runs.jsonl``, ``model.json``, the metrics and ``summary.json``; every process writes its share of each
checkpoint. A rerun resumes from the latest complete checkpoint, data loader included."""

from __future__ import annotations

import gc
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict
from typing import Any

import fsspec

from marinbuild.ml.configs import LmModel, Trainer, from_dict
from marinbuild.ml.distributed import start_distributed
from marinbuild.ml.jsonl import append_record, read_records
from marinbuild.ml.lm_eval_tasks import check_task_names, copy_task_files
from marinbuild.ml.process import child_main, say
from marinbuild.ml.tokenizer import resolve_tokenizer
from marinbuild.ml.train_config import METRICS, MODEL_INFO, SUMMARY, latest_checkpoint, train_lm_config


def run(payload: dict[str, Any]) -> dict[str, Any]:
    from levanter.main import train_lm

    out = payload["output_path"]
    model = from_dict(LmModel, payload["model"])
    trainer = from_dict(Trainer, payload["trainer"])
    tokenizer = resolve_tokenizer(payload["tokenizer"])
    checkpoint_dir = os.path.join(out, "checkpoints")
    lead = start_distributed(payload.get("distributed"))

    # A checkpoint named step-N holds the state after step N: training goes on at step N + 1.
    checkpoint, checkpoint_step = latest_checkpoint(checkpoint_dir)
    how = "resuming from"
    if checkpoint is None and payload.get("initialize_from"):  # a hand-off: levanter's trainer.initialize_from
        checkpoint, how = payload["initialize_from"], "starting from another run's"
        checkpoint_step = int(checkpoint.rstrip("/").rpartition("step-")[2])
    start_step = checkpoint_step + 1 if checkpoint is not None else 0
    done = f"{how} checkpoint {checkpoint}: step {checkpoint_step} done, going on at step {start_step}"
    say(done if checkpoint is not None else f"starting at step 0: no checkpoint under {checkpoint_dir}")
    if lead:
        append_record(
            os.path.join(out, "runs.jsonl"), {"start_step": start_step, "checkpoint": checkpoint, "time": time.time()}
        )
        seq_len = trainer.seq_len or model.seq_len
        info = {"model": asdict(model), "tokenizer": payload["tokenizer"], "seq_len": seq_len, "mp": trainer.mp}
        with fsspec.open(os.path.join(out, MODEL_INFO), "w") as f:
            json.dump(info, f, indent=2)

    work = tempfile.mkdtemp(prefix="marinbuild-train-")
    try:
        task_path = _task_files(payload, work)
        config = train_lm_config(payload, tokenizer=tokenizer, start_step=start_step, lead=lead, task_path=task_path)
        started = time.time()
        train_lm.main(config)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _wait_for_checkpoint_commits()
    summary = summarize(out, start_step=start_step, seconds=time.time() - started)
    if lead:
        with fsspec.open(os.path.join(out, SUMMARY), "w") as f:
            json.dump(summary, f, indent=2)
    say(f"trained to step {summary['last_step']}: train loss {summary.get('final_train_loss')}")
    return summary


def _wait_for_checkpoint_commits() -> None:
    """levanter's checkpoint manager (not exposed) may still be committing the last checkpoint in its thread when
    ``train_lm.main`` returns: wait for every live one, so the summary's latest checkpoint is the last one."""
    from jax.experimental.array_serialization.serialization import AsyncManager

    for manager in [o for o in gc.get_objects() if isinstance(o, AsyncManager)]:
        manager.wait_until_finished()


def _task_files(payload: dict[str, Any], work: str) -> str | None:
    """The target's lm-eval task files copied under ``work`` (or None), every task name checked now, not hours in."""
    specs = payload.get("task_evals") or []
    if not specs:
        return None

    task_path = copy_task_files(payload.get("task_files") or {}, os.path.join(work, "package"))
    check_task_names(sorted({spec["task"] for spec in specs}), task_path)
    return task_path


def summarize(out: str, *, start_step: int, seconds: float) -> dict[str, Any]:
    """Final numbers from ``metrics.jsonl`` and the latest checkpoint."""
    records = read_records(os.path.join(out, METRICS))
    train = [(r["step"], r["train/loss"]) for r in records if "train/loss" in r]
    evals = {k: v for r in records for k, v in r.items() if k.startswith("eval/") and k.endswith("loss")}
    params = next(
        (r["summary"]["parameter_count"] for r in reversed(records) if "parameter_count" in r.get("summary", {})), None
    )
    checkpoint, step = latest_checkpoint(os.path.join(out, "checkpoints"))
    return {
        "last_step": step,
        "checkpoint": checkpoint,
        "start_step": start_step,
        "first_train_loss": train[0][1] if train else None,
        "final_train_loss": train[-1][1] if train else None,
        "final_eval": evals,
        "parameter_count": params,
        "seconds_this_run": round(seconds, 1),
    }


if __name__ == "__main__":
    child_main(run)
