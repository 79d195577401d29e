"""The configuration dataclasses of ``train_lm``: model, optimizer and trainer, pure Python.

BUILD files give them as dicts; ``attr.config`` checks the field names when the BUILD file loads, so a typo is a located
load error, not a crash an hour into a TPU job. Only the ``to_levanter_*`` functions import levanter, in the training
process. Each class has the fields experiments usually set, with levanter's defaults; any other field goes in
``options``, decoded by draccus (``options = {"rope": {"type": "llama3"}}``)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marinbuild.load.attrs import AttrValueError, ConfigAttr, _json_like
from marinbuild.load.frozen import thaw
from marinbuild.ml.config_types import check_field_types

# levanter model families and the module that registers each (imported on demand).
_MODEL_MODULES = {
    "llama": "levanter.models.llama",
    "mistral": "levanter.models.mistral",
    "mixtral": "levanter.models.mixtral",
    "qwen": "levanter.models.qwen",
    "qwen3": "levanter.models.qwen",
    "olmo2": "levanter.models.olmo",
    "olmo3": "levanter.models.olmo3",
    "gemma": "levanter.models.gemma",
    "gemma2": "levanter.models.gemma",
    "gemma3": "levanter.models.gemma",
    "gpt2": "levanter.models.gpt2",
    "apertus": "levanter.models.apertus",
}


@dataclass(frozen=True)
class LmModel:
    """A decoder-only language model: levanter's ``LmConfig`` of family ``type``."""

    type: str = "llama"  # levanter model family: llama, mistral, qwen, qwen3, olmo2, gemma, gpt2, ...
    seq_len: int = 4096
    """the model's maximum sequence length (levanter ``max_seq_len``); training uses it unless the trainer says less"""
    hidden_dim: int = 4096
    intermediate_dim: int = 11008
    num_layers: int = 32
    num_heads: int = 32
    num_kv_heads: int = 32
    rope: str | None = None
    """rotary embedding kind: None (levanter's default), "default", "llama3" or "yarn"; theta etc. in options"""
    tie_word_embeddings: bool = False
    gradient_checkpointing: bool = True
    options: dict[str, Any] = field(default_factory=dict)  # any other field of the levanter config class

    def __post_init__(self) -> None:
        check_field_types(LmModel, _fields(self))
        if self.type not in _MODEL_MODULES:
            raise ValueError(f"unknown model type {self.type!r} (one of {', '.join(sorted(_MODEL_MODULES))})")
        for name in ("seq_len", "hidden_dim", "intermediate_dim", "num_layers", "num_heads", "num_kv_heads"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}")

    def parameter_count(self, vocab_size: int) -> int:
        """Parameters of a Llama-style model of this shape (embeddings untied unless tie_word_embeddings)."""
        head = self.hidden_dim // self.num_heads
        attention = self.hidden_dim * head * (2 * self.num_heads + 2 * self.num_kv_heads)
        mlp = 3 * self.hidden_dim * self.intermediate_dim
        norms = 2 * self.hidden_dim
        embeddings = vocab_size * self.hidden_dim * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * (attention + mlp + norms) + self.hidden_dim + embeddings


@dataclass(frozen=True)
class Optimizer:
    """levanter's ``OptimizerConfig`` of kind ``type`` (AdamW by default), with its learning-rate schedule.

    The schedule fields mean what they mean in levanter and Marin's ``SimpleTrainConfig``: one cycle, or several (WSD-S,
    ``cycle_length``), each warming up (``warmup``, then ``rewarmup``), holding, then decaying over its last ``decay``
    steps to ``learning_rate * min_lr_ratio``. ``warmup``, ``rewarmup``, ``decay`` and an int ``cycle_length`` are a
    fraction or a number of steps."""

    type: str = "adam"
    learning_rate: float = 6e-4
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    epsilon: float = 1e-8
    max_grad_norm: float | None = 1.0
    warmup: float = 0.01  # linear warmup of the first cycle: a fraction of it, or steps
    decay: float | None = None
    """the decay at the end of each cycle: a fraction of the cycle, or steps; None: all of it after warmup"""
    rewarmup: float = 0.0
    """linear warmup at the start of each cycle after the first (WSD-S): a fraction of the cycle, or steps"""
    min_lr_ratio: float = 0.1  # the learning rate at the end of a decay, as a fraction of ``learning_rate``
    lr_schedule: str | dict[str, Any] = "cosine"
    """the decay's shape: one of LR_SCHEDULES, or a dict ``{"type": ..., <its fields>}`` of levanter's
    ``LrSchedule`` choices (e.g. ``{"type": "polynomial", "power": 2.0}``)"""
    cycle_length: float | list[int] | None = None
    """WSD-S cycles: the length of each (steps, or a fraction of the run), or the list of their lengths"""
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_field_types(Optimizer, _fields(self))
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be positive, got {self.learning_rate!r}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be between 0 and 1, got {self.min_lr_ratio!r}")
        for name in ("warmup", "decay", "rewarmup"):
            _check_fraction_or_steps(name, getattr(self, name))
        if isinstance(self.cycle_length, list | tuple):
            if not self.cycle_length or any(n <= 0 for n in self.cycle_length):
                raise ValueError(f"cycle_length must list positive step counts, got {self.cycle_length!r}")
        elif self.cycle_length is not None:
            _check_fraction_or_steps("cycle_length", self.cycle_length)
            if self.cycle_length == 0:
                raise ValueError("cycle_length must be positive, got 0")
        _check_lr_schedule(self.lr_schedule)


LR_SCHEDULES = ("constant", "cosine", "linear", "inv_sqrt", "inv")
"""The decay shapes levanter takes by name (``OptimizerConfig.lr_scheduler``)."""
LR_SCHEDULE_TYPES = (*LR_SCHEDULES, "polynomial", "inv_sqrt_decay", "power")
"""levanter's ``LrSchedule`` choices, given as ``{"type": ..., ...}`` with their own fields."""


def _check_lr_schedule(value: str | dict[str, Any]) -> None:
    if isinstance(value, str):
        if value not in LR_SCHEDULES:
            raise ValueError(
                f"lr_schedule: unknown schedule {value!r} (one of {', '.join(LR_SCHEDULES)}; "
                f'or a dict {{"type": ...}} of {", ".join(LR_SCHEDULE_TYPES)})'
            )
    elif value.get("type") not in LR_SCHEDULE_TYPES:
        raise ValueError(
            f'lr_schedule: a dict needs a "type", one of {", ".join(LR_SCHEDULE_TYPES)}; got {dict(value)!r}'
        )


def _check_fraction_or_steps(name: str, value: float | None) -> None:
    """levanter's reading of a length: a fraction from 0 to 1, or a whole number of steps above 1."""
    if value is not None and (value < 0 or (value > 1 and value % 1 != 0)):
        raise ValueError(f"{name} must be a fraction from 0 to 1 or a whole number of steps, got {value!r}")


def _fields(instance: Any) -> dict[str, Any]:
    return {f.name: getattr(instance, f.name) for f in dataclasses.fields(instance)}


@dataclass(frozen=True)
class Trainer:
    """Batch size, length, checkpoints and evaluation of a training run (levanter's ``TrainerConfig``)."""

    batch_size: int | list[Any] = 512
    """sequences per step; or a schedule [(start_step, batch_size), ...] (levanter's ``ScheduleStep`` list):
    ``[(0, 1024), (160000, 3072)]`` trains on 1024 sequences a step up to step 159999, then 3072"""
    num_train_steps: int = 1000
    seq_len: int | None = None  # training sequence length (default: the model's seq_len)
    checkpoint_every: int = 1000  # keep a checkpoint every this many steps (the last step is always saved)
    checkpoint_minutes: float | None = 10.0
    """also save a temporary checkpoint this often (what a preempted run resumes from); None: only step ones"""
    steps_per_eval: int = 1000
    max_eval_batches: int | None = None
    ema_beta: float | None = None  # exponential moving average of the weights (e.g. 0.995), as in Marin's tootsie runs
    z_loss_weight: float = 0.0  # weight of the z-loss, ``logsumexp(logits)**2`` added to the loss (e.g. 1e-4); 0: none
    mp: str = "p=f32"  # jmp precision policy, e.g. "p=f32,c=bfloat16" on TPUs
    per_device_parallelism: int = -1
    per_device_eval_parallelism: int = -1
    data_seed: int | None = None
    steps_per_task_eval: int | None = None
    """evaluate the target's task_evals (lm-eval) every this many steps; None: every 10000, as Marin does"""
    steps_per_hf_export: int | None = None
    """export the model in Hugging Face form every this many steps, into ``hf/step-N/`` of the output
    (levanter's HF checkpoint converter); None: no exports"""
    allow_partial_checkpoint: bool = False
    """resume from (or start from) a checkpoint that lacks parts of the state, e.g. one saved before
    ``ema_beta`` was set: what is missing is initialised (levanter's ``allow_partial_checkpoint``)"""

    def __post_init__(self) -> None:
        check_field_types(Trainer, _fields(self))
        for name in "num_train_steps checkpoint_every steps_per_eval steps_per_task_eval steps_per_hf_export".split():
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, got {value!r}")
        schedule = batch_schedule(self.batch_size)
        if any(size <= 0 for _, size in schedule):
            raise ValueError(f"batch sizes must be positive, got {self.batch_size!r}")


def batch_schedule(value: int | list[Any]) -> list[tuple[int, int]]:
    """``[(start_step, batch_size), ...]`` for an int or a schedule of pairs or ``{"start", "value"}`` dicts."""
    if isinstance(value, int) and not isinstance(value, bool):
        return [(0, value)]
    if not isinstance(value, list | tuple) or not value:
        raise ValueError(f"batch_size must be an int or a non-empty list of [start_step, size], got {value!r}")
    out: list[tuple[int, int]] = []
    for item in value:
        if isinstance(item, dict):
            start, size = item.get("start"), item.get("value")
        elif isinstance(item, list | tuple) and len(item) == 2:
            start, size = item
        else:
            raise ValueError(f"batch schedule entries are [start_step, size] or {{start, value}}, got {item!r}")
        if not isinstance(start, int) or not isinstance(size, int):
            raise ValueError(f"batch schedule entries must be ints, got {item!r}")
        out.append((start, size))
    if out[0][0] != 0 or any(b[0] <= a[0] for a, b in zip(out, out[1:], strict=False)):
        raise ValueError(f"a batch schedule starts at step 0 and its steps increase, got {value!r}")
    return out


class DataclassAttr(ConfigAttr):
    """``attr.config(cls)`` whose value is the dataclass's fields as a plain dict, defaults filled in.

    The value is checked by building ``cls``, then kept as ``{field: value}``: the same version as the dataclass (Marin
    encodes one as that dict), but ``why`` can name the changed field. Implementations rebuild the instance with
    ``from_dict``."""

    def convert(self, value: Any, package: str) -> Any:
        if isinstance(value, Mapping):  # a wrong type is named with its field before the dataclass sees it
            check_field_types(self.cls, value)
        instance = super().convert(value, package)
        try:
            return _json_like(dataclasses.asdict(instance), self.cls.__name__)
        except AttrValueError as exc:
            raise AttrValueError(f"{self.cls.__name__}: {exc}") from None


config_attr = DataclassAttr  # an attribute holding a ``cls`` written as a dict in BUILD files


def from_dict(cls: type, value: Any) -> Any:
    """An instance of ``cls`` from its ``asdict`` form (what crosses into the training process)."""
    return value if isinstance(value, cls) else cls(**thaw(dict(value)))


# -- conversion to levanter (imports levanter; call only inside the training/eval process) ----------


def to_levanter_model(model: LmModel, tokenizer: str | None = None) -> Any:
    """The levanter ``LmConfig`` for ``model``; ``tokenizer`` becomes the config's tokenizer (no Hub lookups)."""
    import draccus

    importlib.import_module(_MODEL_MODULES[model.type])  # registers the family
    from levanter.models.lm_model import LmConfig

    cls = LmConfig.get_choice_class(model.type)
    names = {f.name for f in dataclasses.fields(cls)}
    same = ("hidden_dim", "intermediate_dim", "num_layers", "num_heads", "num_kv_heads", "tie_word_embeddings")
    wanted: dict[str, Any] = {"max_seq_len": model.seq_len, **{k: getattr(model, k) for k in same}}
    wanted["gradient_checkpointing"] = model.gradient_checkpointing
    if model.rope is not None:
        wanted["rope"] = {"type": model.rope}
    wanted.update(model.options)
    if tokenizer is not None and "tokenizer" in names:
        wanted["tokenizer"] = tokenizer
        if "reference_checkpoint" in names and "reference_checkpoint" not in model.options:
            wanted["reference_checkpoint"] = tokenizer
    unknown = sorted(k for k in wanted if k not in names)
    # gpt2-style configs name some fields differently; drop what this family does not have
    for key in unknown:
        if key in model.options:
            raise ValueError(f"model option {key!r} is not a field of levanter's {cls.__name__}")
        wanted.pop(key)
    return draccus.decode(cls, wanted)


def to_levanter_optimizer(opt: Optimizer) -> Any:
    import draccus
    from levanter.optim import OptimizerConfig

    fields = {k: v for k, v in dataclasses.asdict(opt).items() if k not in ("type", "options")}
    if isinstance(opt.cycle_length, tuple):  # levanter tells a list of cycle lengths by isinstance(list)
        fields["cycle_length"] = list(opt.cycle_length)
    fields.update(opt.options)
    return draccus.decode(OptimizerConfig, {"type": opt.type, **fields})


def levanter_batch_size(trainer: Trainer) -> Any:
    """An int, or levanter's ``ScheduleStep`` list for a schedule."""
    schedule = batch_schedule(trainer.batch_size)
    if len(schedule) == 1:
        return schedule[0][1]
    from levanter.schedule import ScheduleStep

    return [ScheduleStep(start=start, value=size) for start, size in schedule]
