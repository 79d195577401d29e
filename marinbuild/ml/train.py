"""Train a language model with levanter (the child process of the ``train_lm`` rule).

The payload names the tokenized components and their weights, the model, optimizer and
trainer settings (``marinbuild.ml.configs``), the seed and the output folder; this module
builds levanter's ``TrainLmConfig`` from them and runs ``levanter.main.train_lm.main``.
Under the output folder:

    checkpoints/step-N/   levanter checkpoints (kept every ``checkpoint_every`` steps, plus
                          temporary ones every ``checkpoint_minutes``, plus the last step)
    metrics.jsonl         one JSON line per logged step (train loss, eval losses, learning rate)
    runs.jsonl            one line per start: {"start_step", "checkpoint", "time"} (a checkpoint
                          step-N holds the state after step N, so a resumed run starts at N + 1)
    model.json            what eval_lm needs to rebuild the model (model, tokenizer, seq_len)
    summary.json          written at the end: steps, final losses, parameter count
    logs/                 levanter's log and the child's output
    tensorboard/RUN/      TensorBoard event files, with ``tracker = "tensorboard"``

On a multi-host TPU slice (``marinbuild.ml.slice_run``) this module runs once per host, all
together: the payload's ``distributed`` says how JAX distributed starts (``True``: JAX finds
the coordinator itself, as on real TPU VMs; a dict: ``coordinator_address``,
``num_processes`` and ``process_id`` given explicitly, with JAX's CPU collectives (gloo)
where there is no TPU). Only process 0 writes ``runs.jsonl``, ``model.json``, the metrics
and ``summary.json``; every process writes its share of each checkpoint.

A rerun in the same output folder (after a crash, a SIGKILL or a preemption) finds the
latest complete checkpoint and resumes from its step, data loader included, instead of
starting over; ``runs.jsonl`` records where each start began. Tracking is the JSON lines
file, plus the one levanter tracker the target asks for (``tracker = "wandb"`` or
``"tensorboard"``: levanter's ``WandbConfig`` / ``TensorboardConfig``).
"""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec

from marinbuild.ml.configs import LmModel, Optimizer, Trainer, as_dict, from_dict
from marinbuild.ml.jsonl import append_record, read_records
from marinbuild.ml.process import child_main, say

MODEL_INFO = "model.json"
SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"


def compilation_cache_dir() -> str | None:
    """Where jax keeps compiled programs between runs: ``$MARINBUILD_JAX_CACHE`` (empty: none), else ~/.cache."""
    value = os.environ.get("MARINBUILD_JAX_CACHE")
    if value is not None:
        return value or None
    return os.path.join(os.path.expanduser("~"), ".cache", "marinbuild", "jax")


def data_config(
    tokenizer: str,
    components: dict[str, str],
    weights: dict[str, float],
    text_keys: dict[str, str],
    validation: dict[str, str] | None = None,
) -> Any:
    """levanter's ``LmDataConfig`` over existing caches: ``components`` maps a name to a tokenize output folder."""
    from levanter.data.text import DatasetComponent, LmDataConfig, TextLmDatasetFormat, UrlDatasetSourceConfig

    # An empty URL source: levanter loads the caches that exist and skips a missing validation split.
    all_components = {**components, **(validation or {})}
    return LmDataConfig(
        tokenizer=tokenizer,
        cache_dir=None,
        components={
            name: DatasetComponent(
                source=UrlDatasetSourceConfig(),
                cache_dir=path,
                format=TextLmDatasetFormat(text_key=text_keys.get(name, "text")),
            )
            for name, path in all_components.items()
        },
        train_weights={name: float(weights.get(name, 0.0)) for name in components},
        auto_build_caches=False,
    )


def latest_checkpoint(checkpoint_dir: str) -> tuple[str | None, int]:
    """(path, step) of the latest complete checkpoint under ``checkpoint_dir``, or (None, 0)."""
    from levanter.checkpoint import discover_checkpoint_candidates

    try:
        candidates = discover_checkpoint_candidates(checkpoint_dir)
    except FileNotFoundError:
        return None, 0
    if not candidates:
        return None, 0
    return candidates[-1].path, int(candidates[-1].step)


def run(payload: dict[str, Any]) -> dict[str, Any]:
    import jmp
    from levanter.checkpoint import CheckpointerConfig
    from levanter.distributed import DistributedConfig
    from levanter.main import train_lm
    from levanter.optim.model_averaging import EmaModelAveragingConfig
    from levanter.trainer import TrainerConfig

    from marinbuild.ml.configs import levanter_batch_size, to_levanter_model, to_levanter_optimizer
    from marinbuild.ml.tokenizer import resolve_tokenizer
    from marinbuild.ml.tracker import JsonlTrackerConfig

    out = payload["output_path"]
    model = from_dict(LmModel, payload["model"])
    optimizer = from_dict(Optimizer, payload["optimizer"])
    trainer = from_dict(Trainer, payload["trainer"])
    tokenizer = resolve_tokenizer(payload["tokenizer"])
    checkpoint_dir = os.path.join(out, "checkpoints")
    distributed = payload.get("distributed")
    lead = not isinstance(distributed, dict) or distributed["process_id"] == 0
    if isinstance(distributed, dict):
        _cpu_collectives_unless_tpu()
        _host_side_eval_tags()

    # A checkpoint named step-N holds the state after step N: training goes on at step N + 1.
    checkpoint, checkpoint_step = latest_checkpoint(checkpoint_dir)
    start_step = checkpoint_step + 1 if checkpoint is not None else 0
    if checkpoint is not None:
        say(f"resuming from checkpoint {checkpoint}: step {checkpoint_step} done, going on at step {start_step}")
    else:
        say(f"starting at step 0: no checkpoint under {checkpoint_dir}")
    if lead:
        append_record(
            os.path.join(out, "runs.jsonl"), {"start_step": start_step, "checkpoint": checkpoint, "time": time.time()}
        )
        with fsspec.open(os.path.join(out, MODEL_INFO), "w") as f:
            json.dump(
                {
                    "model": as_dict(model),
                    "tokenizer": payload["tokenizer"],
                    "seq_len": trainer.seq_len or model.seq_len,
                    "mp": trainer.mp,
                },
                f,
                indent=2,
            )

    trackers: list[Any] = [JsonlTrackerConfig(path=os.path.join(out, METRICS), start_step=start_step)]
    if not lead:  # the other hosts of a slice: process 0 keeps the metrics
        from levanter.tracker import NoopConfig

        trackers = [NoopConfig()]
    else:
        trackers += extra_trackers(payload.get("tracker") or "json", out, payload["run_id"])
    trainer_config = TrainerConfig(
        seed=payload["seed"],
        mp=jmp.get_policy(trainer.mp),
        id=payload["run_id"],
        log_dir=Path(os.path.join(out, "logs") if "://" not in out else "logs"),
        tracker=tuple(trackers),
        train_batch_size=levanter_batch_size(trainer),
        per_device_parallelism=trainer.per_device_parallelism,
        per_device_eval_parallelism=trainer.per_device_eval_parallelism,
        num_train_steps=trainer.num_train_steps,
        steps_per_eval=trainer.steps_per_eval,
        max_eval_batches=trainer.max_eval_batches,
        model_averaging=EmaModelAveragingConfig(beta=trainer.ema_beta) if trainer.ema_beta else None,
        checkpointer=CheckpointerConfig(
            base_path=checkpoint_dir,
            append_run_id_to_base_path=False,
            save_interval=timedelta(minutes=trainer.checkpoint_minutes) if trainer.checkpoint_minutes else None,
            keep=[{"every": trainer.checkpoint_every}],
        ),
        require_accelerator=bool(payload.get("require_accelerator")),
        distributed=_distributed_config(DistributedConfig, distributed),
        jax_compilation_cache_dir=compilation_cache_dir(),
        allow_nondivisible_batch_size=True,
        log_jaxprs=False,
        log_xla_hlo=False,
    )
    config = train_lm.TrainLmConfig(
        data=data_config(
            tokenizer, payload["components"], payload["weights"], payload["text_keys"], payload.get("validation")
        ),
        trainer=trainer_config,
        model=to_levanter_model(model, tokenizer),
        optimizer=to_levanter_optimizer(optimizer),
        train_seq_len=trainer.seq_len,
        z_loss_weight=trainer.z_loss_weight,
        data_seed=trainer.data_seed,
        hf_save_steps=10**9,
    )
    started = time.time()
    train_lm.main(config)
    summary = summarize(out, start_step=start_step, seconds=time.time() - started)
    if lead:
        with fsspec.open(os.path.join(out, SUMMARY), "w") as f:
            json.dump(summary, f, indent=2)
    say(f"trained to step {summary['last_step']}: train loss {summary.get('final_train_loss')}")
    return summary


def extra_trackers(tracker: str, out: str, run_id: str) -> list[Any]:
    """levanter's own tracker configs for the target's ``tracker`` besides the JSON lines file.

    ``wandb``: a W&B run named after the output folder (project ``$WANDB_PROJECT``, default
    ``marin``); ``tensorboard``: tensorboardX event files under ``<out>/tensorboard/<run_id>/``.
    """
    if tracker == "wandb":
        from levanter.tracker.wandb import WandbConfig

        return [
            WandbConfig(
                project=os.environ.get("WANDB_PROJECT", "marin"), name=run_id, resume="allow", replicate_path=out
            )
        ]
    if tracker == "tensorboard":
        from levanter.tracker.tensorboard import TensorboardConfig

        return [TensorboardConfig(logdir=os.path.join(out, TENSORBOARD))]
    return []


def _distributed_config(cls: Any, distributed: Any) -> Any:
    """levanter's ``DistributedConfig``: off (one host), found by JAX (``True``), or explicit (a dict)."""
    if isinstance(distributed, dict):
        return cls(
            coordinator_address=distributed["coordinator_address"],
            num_processes=int(distributed["num_processes"]),
            process_id=int(distributed["process_id"]),
        )
    return cls(initialize_jax_distributed=bool(distributed))


def _host_side_eval_tags() -> None:
    """Keep the tag arrays of levanter's evaluation datasets on the host (numpy), as its loader expects.

    ``DomainTaggedDataset`` builds them with ``jnp.asarray`` under the trainer's global mesh: with
    several CPU processes each array then spans every process's device, and the loader's host-side
    batching (``local_cpu_mesh``) rejects it ("Received incompatible devices for jitted computation"),
    so every evaluation failed. Applied where the processes get their coordinator explicitly (no TPU).
    """
    import numpy as np
    from levanter.eval import DomainTaggedDataset

    def compute_tag_arrays(self: Any) -> list[Any]:
        arrays = []
        for _dataset, tags in self.datasets:
            array = np.zeros(self.num_tags, dtype=np.int32)
            array[[self.tag_to_index[tag] for tag in tags]] = 1
            arrays.append(array)
        return arrays

    DomainTaggedDataset._compute_tag_arrays = compute_tag_arrays


def _cpu_collectives_unless_tpu() -> None:
    """Collectives across the processes of a slice run on CPU through gloo when this host has no TPU."""
    from marinbuild.run.resources import local_tpu_chips

    if local_tpu_chips() == 0:
        import jax

        jax.config.update("jax_cpu_collectives_implementation", "gloo")


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
