"""Each training setting of ``train_lm`` converted to levanter's own config, its values checked without training.

The learning-rate schedules are levanter's optax schedules (``OptimizerConfig.lr_scheduler``)
evaluated at given steps; the batch schedule is levanter's ``BatchSchedule``; the mixture's
weights are those of levanter's ``MixtureDataset`` at steps before and after a change. The
lead test runs ``train.run`` with levanter's training loop replaced, on the real-host branch
(``distributed = True``), and shows that only process 0 writes the run's files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from qs_workspace import needs_levanter

from marinbuild.load.attrs import AttrValueError
from marinbuild.ml.configs import LR_SCHEDULE_TYPES, LR_SCHEDULES, LmModel, Optimizer, Trainer, config_attr
from marinbuild.ml.mixture import MixtureWeightAttr, mixture_weights

pytestmark = needs_levanter

MODEL = {"seq_len": 64, "hidden_dim": 32, "intermediate_dim": 64, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2}


def payload(tmp_path: Path, *, optimizer=None, trainer=None, weights=None, distributed=False, task_evals=()) -> dict:
    return {
        "output_path": str(tmp_path / "lm"),
        "run_id": "lm",
        "components": {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")},
        "weights": weights if weights is not None else {"a": 1.0, "b": 0.0},
        "validation": {},
        "text_keys": {},
        "tokenizer": "gpt2",
        "model": MODEL,
        "optimizer": optimizer or {},
        "trainer": {"batch_size": 8, "num_train_steps": 100, **(trainer or {})},
        "seed": 0,
        "tracker": "json",
        "task_evals": list(task_evals),
        "task_files": {},
        "require_accelerator": False,
        "distributed": distributed,
    }


def levanter_config(tmp_path: Path, **kwargs):
    from marinbuild.ml.train_config import train_lm_config

    return train_lm_config(payload(tmp_path, **kwargs), tokenizer="gpt2", start_step=0, lead=True)


def lr_at(optimizer: dict, steps: list[int], num_train_steps: int = 100) -> list[float]:
    from marinbuild.ml.configs import to_levanter_optimizer

    schedule = to_levanter_optimizer(Optimizer(**optimizer)).lr_scheduler(num_train_steps)
    return [float(schedule(step)) for step in steps]


def test_wsd_s_cycles_rewarmup_and_decay_in_steps():
    # two cycles of 50 steps: warmup 10 steps, then in each cycle a linear decay over its last 20% (10 steps)
    # to 0.1 x the peak; the second cycle re-warms up over 5 steps from where the first ended
    opt = {
        "learning_rate": 1e-3,
        "warmup": 10,
        "cycle_length": 50,
        "decay": 0.2,
        "rewarmup": 5,
        "min_lr_ratio": 0.1,
        "lr_schedule": "linear",
    }
    values = lr_at(opt, [0, 5, 10, 39, 45, 50, 52, 55, 89, 95])
    assert values == pytest.approx([0, 5e-4, 1e-3, 1e-3, 5.5e-4, 1e-4, 4.6e-4, 1e-3, 1e-3, 5.5e-4], rel=1e-5)
    from marinbuild.ml.configs import to_levanter_optimizer

    config = to_levanter_optimizer(Optimizer(**opt))
    assert (config.cycle_length, config.rewarmup, config.decay, config.min_lr_ratio) == (50, 5, 0.2, 0.1)
    # decay as a step count means the same as the fraction that gives it
    assert lr_at({**opt, "decay": 10}, [39, 45, 95]) == pytest.approx(lr_at(opt, [39, 45, 95]))


def test_cycle_lengths_as_a_list():
    # cycles of 30 and 70 steps, each decaying linearly over its last 10; without rewarmup the second
    # cycle starts at the peak again
    opt = {"learning_rate": 1e-3, "warmup": 0, "cycle_length": [30, 70], "decay": 10, "lr_schedule": "linear"}
    values = lr_at(opt, [19, 25, 29, 30, 89, 95])
    assert values == pytest.approx([1e-3, 5.5e-4, 1.9e-4, 1e-3, 1e-3, 5.5e-4], rel=1e-5)
    # as a BUILD file's attribute holds it (lists become tuples), and as the training process gets it
    from marinbuild.ml.configs import from_dict

    held = config_attr(Optimizer).convert({**opt, "cycle_length": (30, 70)}, "pipe")
    assert held["cycle_length"] == (30, 70)
    assert lr_at(dict(from_dict(Optimizer, held).__dict__), [25, 30]) == pytest.approx([values[1], values[3]], rel=1e-5)


def test_inv_schedule_and_min_lr_ratio():
    # "inv": lr / ((1 / min_lr_ratio - 1) * max(t, 1) / decay_steps + 1), floored at lr * min_lr_ratio
    values = lr_at({"learning_rate": 1e-3, "warmup": 0, "lr_schedule": "inv", "min_lr_ratio": 0.1}, [0, 50, 99])
    assert values == pytest.approx([1e-3 / (9 * 0.01 + 1), 1e-3 / (9 * 0.5 + 1), 1e-3 / (9 * 0.99 + 1)], rel=1e-5)
    # WSD with an inv decay over the last 10 steps
    wsd = lr_at({"learning_rate": 1e-3, "warmup": 0, "lr_schedule": "inv", "min_lr_ratio": 0.5, "decay": 10}, [89, 99])
    assert wsd == pytest.approx([1e-3, 1e-3 / (1 * 9 / 10 + 1)], rel=1e-5)


def test_every_schedule_name_is_levanters():
    from levanter.optim.config import LrSchedule

    assert set(LR_SCHEDULE_TYPES) == set(LrSchedule.get_known_choices())
    for name in LR_SCHEDULES:
        assert len(lr_at({"lr_schedule": name, "decay": 0.5}, [0, 60])) == 2
    # a choice with fields of its own, as a dict
    squared = lr_at({"learning_rate": 1e-3, "warmup": 0, "lr_schedule": {"type": "polynomial", "power": 2.0}}, [50])
    linear = lr_at({"learning_rate": 1e-3, "warmup": 0, "lr_schedule": "linear"}, [50])
    assert squared[0] < linear[0]


def test_z_loss_partial_checkpoint_and_hf_exports_reach_levanter(tmp_path):
    config = levanter_config(
        tmp_path, trainer={"z_loss_weight": 1e-4, "allow_partial_checkpoint": True, "steps_per_hf_export": 20}
    )
    assert config.z_loss_weight == 1e-4
    assert config.trainer.allow_partial_checkpoint is True
    assert (config.hf_save_path, config.hf_save_steps) == (str(tmp_path / "lm" / "hf"), 20)
    plain = levanter_config(tmp_path)
    assert (plain.z_loss_weight, plain.trainer.allow_partial_checkpoint, plain.hf_save_path) == (0.0, False, None)
    assert plain.trainer.distributed.initialize_jax_distributed is False  # distributed.start_distributed starts it


def test_task_evals_reach_levanters_eval_harness_callback(tmp_path):
    tasks = [{"task": "hellaswag", "num_fewshot": 10, "task_alias": "hellaswag_10shot"}, {"task": "piqa"}]
    config = levanter_config(tmp_path, trainer={"steps_per_task_eval": 500}, task_evals=tasks)
    assert config.eval_harness_steps == 500
    assert [(t.task, t.num_fewshot, t.task_alias) for t in config.eval_harness.task_spec] == [
        ("hellaswag", 10, "hellaswag_10shot"),
        ("piqa", None, None),
    ]
    assert levanter_config(tmp_path, task_evals=tasks).eval_harness_steps == 10_000  # Marin's default
    assert levanter_config(tmp_path).eval_harness is None


def test_a_metric_logged_without_a_step_belongs_to_the_last_step(tmp_path):
    from marinbuild.ml.tracker import JsonlTracker

    tracker = JsonlTracker(str(tmp_path / "metrics.jsonl"))
    tracker.log({"train/loss": 2.0}, step=15)
    tracker.log({"lm_eval": {"story": {"acc": 0.4}}}, step=None)  # as levanter's eval-harness callback logs
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records == [{"step": 15, "train/loss": 2.0}, {"step": 15, "lm_eval/story/acc": 0.4}]


def test_batch_schedule_with_three_steps(tmp_path):
    config = levanter_config(tmp_path, trainer={"batch_size": [(0, 8), (10, 16), (20, 32)]})
    schedule = config.trainer.batch_schedule
    sizes = {step: schedule.batch_size_at_step(step) for step in (0, 9, 10, 19, 20, 99)}
    assert sizes == {0: 8, 9: 8, 10: 16, 19: 16, 20: 32, 99: 32}
    assert schedule.global_data_offset_by_step(25) == 10 * 8 + 10 * 16 + 5 * 32


def test_mixture_that_changes_at_a_step(tmp_path):
    from levanter.data.dataset import ListAsyncDataset
    from levanter.data.mixture import MixtureDataset, rescale_mixture_schedule_for_batch_schedule

    # batch 64 from step 0: step 32 starts at sequence 2048, levanter's first mixture block boundary
    weights = mixture_weights({"a": [1.0, 0.25], "b": [0.0, 0.75]}, [0, 32])
    assert weights == [[0, {"a": 1.0, "b": 0.0}], [32, {"a": 0.25, "b": 0.75}]]
    config = levanter_config(tmp_path, weights=weights, trainer={"batch_size": 64})
    assert config.data.train_weights == [(0, {"a": 1.0, "b": 0.0}), (32, {"a": 0.25, "b": 0.75})]
    batches = config.trainer.batch_schedule
    stages = rescale_mixture_schedule_for_batch_schedule(config.data.train_weights, batches)
    data = {name: ListAsyncDataset(list(range(10_000))) for name in ("a", "b")}
    mixture = MixtureDataset(data, stages, block_size=config.data.mixture_block_size, key=0)

    def weights_at(step: int) -> dict[str, float]:  # what levanter's log_mixture_weights hook logs
        block = batches.global_data_offset_by_step(step) // mixture.block_size
        return mixture.weight_stages[mixture._get_stage_for_block(block)][1]

    assert weights_at(0) == weights_at(31) == {"a": 1.0}  # levanter drops zero weights
    assert weights_at(32) == weights_at(99) == {"a": 0.25, "b": 0.75}
    # a change inside a block is refused with one line, before levanter asserts
    with pytest.raises(ValueError, match="change at step 10, sequence 80 of the run"):
        levanter_config(tmp_path, weights=mixture_weights({"a": [1.0, 0.5], "b": [0.0, 0.5]}, [0, 10]))


@pytest.mark.parametrize(
    ("data", "steps", "message"),
    [
        ({"a": [1.0, 0.5]}, [], "weight of a: 2 weights, but data_steps is empty"),
        ({"a": [1.0, 0.5]}, [0, 5, 9], "weight of a: 2 weights, but there are 3 data_steps"),
        ({"a": [1.0, 0.5]}, [3, 5], "data_steps start at 0 and increase"),
        ({"a": [1.0, 0.0], "b": [0.0, 0.0]}, [0, 5], "the mixture from step 5 needs at least one"),
        ({"a": -1.0, "b": 2.0}, [], "cannot be negative"),
    ],
)
def test_mixture_errors(data, steps, message):
    with pytest.raises(AttrValueError, match=message):
        mixture_weights(data, steps)
    assert mixture_weights({"a": 0.5, "b": [0.0, 1.0]}, [0, 5]) == [
        [0, {"a": 0.5, "b": 0.0}],
        [5, {"a": 0.5, "b": 1.0}],
    ]
    with pytest.raises(AttrValueError, match="expected a number or a list of numbers"):
        MixtureWeightAttr().convert("heavy", "pipe")


@pytest.mark.parametrize(
    ("cls", "fields", "message"),
    [
        (Optimizer, {"learning_rate": "fast"}, "learning_rate: expected a number, got str 'fast'"),
        (Optimizer, {"warmup": True}, "warmup: expected a number, got bool True"),
        (Optimizer, {"cycle_length": [10, "x"]}, "cycle_length: expected a number or a list of ints or None"),
        (Optimizer, {"lr_schedule": 3}, "lr_schedule: expected a string or a dict, got int 3"),
        (Trainer, {"num_train_steps": 10.5}, "num_train_steps: expected an int, got float 10.5"),
        (Trainer, {"allow_partial_checkpoint": "yes"}, "allow_partial_checkpoint: expected True or False"),
        (LmModel, {"rope": 1}, "rope: expected a string or None, got int 1"),
    ],
)
def test_wrong_types_name_the_field_and_the_type(cls, fields, message):
    with pytest.raises(AttrValueError) as caught:
        config_attr(cls).convert(fields, "pipe")
    assert str(caught.value).startswith(message)
    with pytest.raises(ValueError, match=message.split(", got")[0]):  # the same check where configs are built
        cls(**fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"decay": 2.5}, "decay must be a fraction from 0 to 1 or a whole number of steps, got 2.5"),
        ({"rewarmup": -0.1}, "rewarmup must be a fraction"),
        ({"cycle_length": [10, 0]}, "cycle_length must list positive step counts"),
        ({"min_lr_ratio": 2.0}, "min_lr_ratio must be between 0 and 1"),
        ({"lr_schedule": "wsd"}, "unknown schedule 'wsd'"),
        ({"lr_schedule": {"type": "wsd"}}, 'a dict needs a "type"'),
    ],
)
def test_schedule_values_out_of_range(fields, message):
    with pytest.raises(ValueError, match=message):
        Optimizer(**fields)


@pytest.mark.parametrize(("process_index", "writes"), [(0, True), (1, False)])
def test_only_process_0_of_real_hosts_writes_the_run_files(tmp_path, monkeypatch, process_index, writes):
    """``distributed = True`` (a real TPU host, JAX finds its coordinator): the lead is jax process 0 alone."""
    import jax
    from levanter.distributed import DistributedConfig
    from levanter.main import train_lm

    from marinbuild.ml import distributed, train

    started: list[DistributedConfig] = []
    trained: list[object] = []
    tags: list[bool] = []
    monkeypatch.setattr(DistributedConfig, "initialize", lambda self: started.append(self))
    monkeypatch.setattr(jax, "process_index", lambda: process_index)
    monkeypatch.setattr(jax, "process_count", lambda: 4)
    monkeypatch.setattr(distributed, "cpu_collectives_unless_tpu", lambda: None)
    monkeypatch.setattr(distributed, "host_side_eval_tags", lambda: tags.append(True))
    monkeypatch.setattr(distributed, "host_side_packing", lambda: tags.append(True))
    monkeypatch.setattr(train_lm, "main", lambda config: trained.append(config))

    summary = train.run(payload(tmp_path, distributed=True))
    (config,) = trained
    assert [c.initialize_jax_distributed for c in started] == [True]  # levanter's own start, once, before training
    assert config.trainer.distributed.initialize_jax_distributed is False
    assert tags == [True, True]  # several processes: the same levanter fixes as on simulated hosts
    out = tmp_path / "lm"
    written = {name: (out / name).exists() for name in ("runs.jsonl", "model.json", "summary.json")}
    assert written == dict.fromkeys(written, writes)
    tracker_kinds = {type(t).__name__ for t in config.trainer.tracker}
    assert tracker_kinds == ({"JsonlTrackerConfig"} if writes else {"NoopConfig"})
    if writes:
        assert json.loads((out / "runs.jsonl").read_text().splitlines()[0])["start_step"] == 0
        assert summary["last_step"] == 0
