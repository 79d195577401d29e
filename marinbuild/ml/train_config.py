"""levanter's ``TrainLmConfig`` for a ``train_lm`` payload: every setting through levanter's own classes.

``train_lm_config`` only builds configs (``TrainerConfig``, ``OptimizerConfig`` via ``configs.to_levanter_optimizer``,
``LmDataConfig`` with fixed or step-varying weights, z-loss, lm-eval callback, HF exports into ``hf/step-N/``) and
starts nothing, so tests check the settings without training. Imports levanter: call it only in the training process (or
a test)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import fsspec

from marinbuild.ml.configs import (
    LmModel,
    Optimizer,
    Trainer,
    from_dict,
    levanter_batch_size,
    to_levanter_model,
    to_levanter_optimizer,
)

MODEL_INFO = "model.json"
SUMMARY = "summary.json"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
HF_EXPORTS = "hf"  # The sub-folder of a training output where HF exports go, one ``step-N/`` folder each.
TASK_EVAL_STEPS = 10_000  # How often task evaluations run when ``steps_per_task_eval`` is not given (Marin's default).
MIXTURE_BLOCK_SIZE = 2048
"""levanter's mixture block (sequences): a mixture's weights can change only at a multiple of it."""

Weights = dict[str, float] | list[Any]
"""Mixture weights: ``{name: weight}``, or ``[[start_step, {name: weight}], ...]`` (the first at step 0)."""


def compilation_cache_dir() -> str | None:
    """Where jax keeps compiled programs between runs: ``$MARINBUILD_JAX_CACHE`` (empty: none), else ~/.cache."""
    value = os.environ.get("MARINBUILD_JAX_CACHE")
    if value is not None:
        return value or None
    return os.path.join(os.path.expanduser("~"), ".cache", "marinbuild", "jax")


def data_config(
    tokenizer: str,
    components: dict[str, str],
    weights: Weights,
    text_keys: dict[str, str],
    validation: dict[str, str] | None = None,
) -> Any:
    """levanter's ``LmDataConfig`` over tokenize output folders (``components``: name -> folder); ``weights`` as
    ``[start_step, {name: weight}]`` stages, each starting at a multiple of ``MIXTURE_BLOCK_SIZE``."""
    from levanter.data.text import DatasetComponent, LmDataConfig, TextLmDatasetFormat, UrlDatasetSourceConfig

    def stage(w: dict[str, float]) -> dict[str, float]:
        return {name: float(w.get(name, 0.0)) for name in components}

    train_weights: Any = stage(weights) if isinstance(weights, dict) else [(int(step), stage(w)) for step, w in weights]
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
        train_weights=train_weights,
        mixture_block_size=MIXTURE_BLOCK_SIZE,
        auto_build_caches=False,
    )


def check_mixture_steps(weights: Weights, batch_size: Any) -> None:
    """Fail with one line when a weight change falls inside one of levanter's mixture blocks."""
    if isinstance(weights, dict):
        return
    from levanter.schedule import BatchSchedule

    schedule = BatchSchedule(batch_size)
    for step, _ in weights[1:]:
        offset = schedule.global_data_offset_by_step(int(step))
        if offset % MIXTURE_BLOCK_SIZE:
            raise ValueError(
                f"the mixture's weights change at step {step}, sequence {offset} of the run, but levanter "
                f"changes them only every {MIXTURE_BLOCK_SIZE} sequences: pick a step whose first sequence "
                f"(the sum of the batch sizes before it) is a multiple of {MIXTURE_BLOCK_SIZE}"
            )


def train_lm_config(
    payload: dict[str, Any], *, tokenizer: str, start_step: int, lead: bool, task_path: str | None = None
) -> Any:
    """levanter's ``TrainLmConfig`` for ``payload``; ``lead``: this process keeps the metrics."""
    import jmp
    from levanter.checkpoint import CheckpointerConfig
    from levanter.distributed import DistributedConfig
    from levanter.main.train_lm import TrainLmConfig
    from levanter.optim.model_averaging import EmaModelAveragingConfig
    from levanter.trainer import TrainerConfig

    from marinbuild.ml.tracker import JsonlTrackerConfig  # lazy: levanter (and fsspec below)

    out = payload["output_path"]
    model = from_dict(LmModel, payload["model"])
    optimizer = from_dict(Optimizer, payload["optimizer"])
    trainer = from_dict(Trainer, payload["trainer"])
    batch_size = levanter_batch_size(trainer)
    check_mixture_steps(payload["weights"], batch_size)

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
        train_batch_size=batch_size,
        per_device_parallelism=trainer.per_device_parallelism,
        per_device_eval_parallelism=trainer.per_device_eval_parallelism,
        num_train_steps=trainer.num_train_steps,
        steps_per_eval=trainer.steps_per_eval,
        max_eval_batches=trainer.max_eval_batches,
        model_averaging=EmaModelAveragingConfig(beta=trainer.ema_beta) if trainer.ema_beta else None,
        checkpointer=CheckpointerConfig(
            base_path=os.path.join(out, "checkpoints"),
            append_run_id_to_base_path=False,
            save_interval=timedelta(minutes=trainer.checkpoint_minutes) if trainer.checkpoint_minutes else None,
            keep=[{"every": trainer.checkpoint_every}],
        ),
        require_accelerator=bool(payload.get("require_accelerator")),
        distributed=DistributedConfig(initialize_jax_distributed=False),  # train.start_distributed starts it
        allow_partial_checkpoint=trainer.allow_partial_checkpoint,
        initialize_from=payload.get("initialize_from"),  # used while the run has no checkpoint of its own
        jax_compilation_cache_dir=compilation_cache_dir(),
        allow_nondivisible_batch_size=True,
        log_jaxprs=False,
        log_xla_hlo=False,
    )
    return TrainLmConfig(
        data=data_config(
            tokenizer, payload["components"], payload["weights"], payload["text_keys"], payload.get("validation")
        ),
        trainer=trainer_config,
        model=to_levanter_model(model, tokenizer),
        optimizer=to_levanter_optimizer(optimizer),
        train_seq_len=trainer.seq_len,
        z_loss_weight=trainer.z_loss_weight,
        data_seed=trainer.data_seed,
        eval_harness=task_evals(payload.get("task_evals") or [], task_path),
        eval_harness_steps=trainer.steps_per_task_eval or TASK_EVAL_STEPS,
        **hf_exports(out, trainer.steps_per_hf_export),
    )


def task_evals(specs: list[dict[str, Any]], task_path: str | None) -> Any:
    """levanter's ``LmEvalHarnessConfig`` of the tasks evaluated while training (None: none)."""
    if not specs:
        return None
    from marinbuild.ml.lm_eval_tasks import harness_config

    return harness_config(specs, task_path, None)


def hf_exports(out: str, every: int | None) -> dict[str, Any]:
    """``TrainLmConfig`` fields of HF exports every ``every`` steps into ``<out>/hf/step-N/`` (None: none)."""
    if every is None:
        return {"hf_save_path": None}
    return {"hf_save_path": os.path.join(out, HF_EXPORTS), "hf_save_steps": every}


def extra_trackers(tracker: str, out: str, run_id: str) -> list[Any]:
    """levanter's configs for ``tracker`` besides the JSON lines: ``wandb`` (run named by output), ``tensorboard``."""
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


def latest_checkpoint(checkpoint_dir: str) -> tuple[str | None, int]:
    """(path, step) of the latest complete checkpoint under ``checkpoint_dir``, or (None, 0)."""
    from levanter.checkpoint import discover_checkpoint_candidates

    fsspec.core.url_to_fs(checkpoint_dir)[0].invalidate_cache()  # what this process listed before may have changed
    try:
        candidates = discover_checkpoint_candidates(checkpoint_dir)
    except FileNotFoundError:
        return None, 0
    return (candidates[-1].path, int(candidates[-1].step)) if candidates else (None, 0)
