"""Each phase of //experiments:tootsie_8b converted to levanter's ``TrainLmConfig``, checked against Marin's facts.

The facts are restated here from marin-community/marin (``experiments/tootsie/exp600_tootsie.py`` at commit
04558eff, ``experiments/defaults.py``, ``experiments/llama.py``, ``experiments/evals/task_configs.py``,
``experiments/pretraining_datasets/``), not read from the BUILD files: the mixture weights are computed here
with exp600's own arithmetic, the learning rates at given steps worked out from exp600's schedule settings.
The BUILD files are loaded and analysed through ``Session``; each phase's attributes go to
``marinbuild.ml.train_config.train_lm_config`` as ``train_lm`` hands them to the training process, and the
answers are levanter's own (its optax schedule, ``BatchSchedule``, ``LmDataConfig``). Nothing trains.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from qs_workspace import needs_levanter

from marinbuild.analysis.session import Session
from marinbuild.core.labels import parse_label
from marinbuild.load.frozen import thaw
from marinbuild.ml.mixture import mixture_weights

pytestmark = needs_levanter

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "//experiments/tootsie:"
LLAMA3 = "meta-llama/Meta-Llama-3.1-8B"
PHASES = [
    "kestrel",
    "ocelot",
    "jellyfish",
    "dessert_bad",
    "dessert",
    "cooldown_v2",
    "phoenix",
    "starling",
    "deeper_starling",
]

# -- Marin's facts ------------------------------------------------------------------------------

OUTPUT = {  # override_output_path / with_output_path of each phase
    "kestrel": "checkpoints/llama-8b-tootsie-0.001-19ad63",
    "ocelot": "checkpoints/llama-8b-tootsie-phase2",
    "jellyfish": "checkpoints/llama-8b-tootsie-phase3",
    "dessert_bad": "checkpoints/llama-8b-tootsie-dessert",
    "dessert": "checkpoints/llama-8b-tootsie-dessert-v3",
    "cooldown_v2": "checkpoints/llama-8b-tootsie-cooldown-take-2",
    "phoenix": "checkpoints/llama-8b-tootsie-adept-phoenix",
    "starling": "checkpoints/tootsie-8b-sensible-starling",
    "deeper_starling": "checkpoints/tootsie-8b-deeper-starling",
}
TPUS = {  # ResourceConfig.with_tpu(type, slice_count)
    "kestrel": {"tpu": "v5litepod-256", "slices": 2},
    "dessert_bad": {"tpu": "v4-128", "slices": 4},
    "dessert": {"tpu": "v4-128", "slices": 4},
}
HANDOFF = {  # initialize_from_checkpoint_path: (phase, step); the dessert attempts have none
    "ocelot": ("kestrel", 660000),
    "jellyfish": ("kestrel", 738376),
    "cooldown_v2": ("kestrel", 738376),
    "phoenix": ("jellyfish", 819924),
    "starling": ("phoenix", 1320000),
    "deeper_starling": ("starling", 1399923),
}
STEPS = {
    "kestrel": 1_000_000,
    "ocelot": 1_000_000,
    "jellyfish": 820_000,
    "dessert_bad": 837_000,
    "dessert": 837_000,
    "cooldown_v2": 820_000,
    "phoenix": 2_000_000,
    "starling": 1_400_000,
    "deeper_starling": 1_420_000,
}
CORE_TASKS = [
    ("agieval_lsat_ar", 3, None),
    ("arc_easy", 10, None),
    ("arc_challenge", 10, None),
    ("boolq", 10, None),
    ("commonsense_qa", 10, None),
    ("copa", 0, None),
    ("hellaswag", 0, "hellaswag_0shot"),
    ("hellaswag", 10, "hellaswag_10shot"),
    ("lambada_openai", 0, None),
    ("openbookqa", 0, None),
    ("piqa", 10, None),
    ("wsc273", 0, None),
    ("winogrande", 0, None),
]
MMLU = [("mmlu", 0, "mmlu_0shot"), ("mmlu", 5, "mmlu_5shot")]
TASKS = {
    "dessert": [],
    "cooldown_v2": [],
    "phoenix": CORE_TASKS + MMLU,
    "starling": CORE_TASKS + MMLU,
    "deeper_starling": CORE_TASKS + MMLU,
}
PALOMA = [
    "4chan",
    "c4_100_domains",
    "c4_en",
    "dolma-v1_5",
    "dolma_100_programing_languages",
    "dolma_100_subreddits",
    "falcon-refinedweb",
    "gab",
    "m2d2_s2orc_unsplit",
    "m2d2_wikipedia_unsplit",
    "manosphere_meta_sep",
    "mc4",
    "ptb",
    "redpajama",
    "twitterAAE_HELM_fixed",
    "wikitext_103",
]
UNCHEATABLE = ["wikipedia_english", "github_python", "github_cpp", "bbc_news", "arxiv_physics"]
UNCHEATABLE += ["arxiv_computer_science", "ao3_english"]


def marin_mixtures() -> dict[str, list[tuple[int, dict[str, float]]]]:
    """exp600's weights_list of each phase, as exp600 computes them (its names for the datasets)."""
    dclm = {"dclm_baseline": 3.8, "starcoderdata": 0.25, "proofpile_2": 0.055}
    hq = {
        "dolma/algebraic-stack": 11.5 * 1.0,
        "dolma/arxiv": 27.9 * 1.0,
        "dolma/megawika": 4.44 * 1.0,
        "dolma/open-web-math": 5.06 * 1.0,
        "dolma/pes2o": 58.1 * 1.0,
        "dolma/stackexchange": 17.1 * 1.0,
        "dolma/wiki": 3.65 * 1.0,
        "finemath_3_plus": 34.0 * 1.0,
    }
    web = {"dolmino_dclm": 700.0 * 1.0, "starcoderdata": 230.0 * 0.1}
    hq_total, web_total = sum(hq.values()), sum(web.values())
    v1 = {**{k: 30.0 * v / hq_total for k, v in hq.items()}, **{k: 70.0 * v / web_total for k, v in web.items()}}
    dessert = {
        "flan": 17e9,
        "math/dolmino_math_synth": 28.7e6,
        "math/tulu_math": 230e6,
        "math/gsm8k": 2.74e6,
        "math/mathcoder2-synthmath": 3.87e9,
        "math/metamath-owmfilter": 84.2e6,
        "math/codesearchnet-owmfilter": 1.8e6,
    }
    dessert_total = sum(dessert.values())
    math = sum(v for k, v in dessert.items() if "math" in k)
    bad = {
        **{k: 0.2 * v / dessert_total for k, v in dessert.items()},
        **{k: 0.7 * v / web_total for k, v in web.items()},
        **{k: 0.1 * v / hq_total for k, v in hq.items()},
    }
    fixed = {
        **{k: 0.7 * v / web_total for k, v in web.items()},
        **{k: 0.2 * v / hq_total for k, v in hq.items()},
        "flan": 0.1 * dessert["flan"] / dessert_total,
        "all_math": 0.1 * math / dessert_total,
    }
    hq2 = {**hq, "all_math": math / 1e9}
    hq2_total = sum(hq2.values())
    v2 = {**{k: 0.25 * v / hq2_total for k, v in hq2.items()}, **{k: 0.7 * v / web_total for k, v in web.items()}}
    v2["flan"] = 0.05
    nemotron = {
        "nemotron_cc/hq_actual": 0.91351,
        "nemotron_cc/hq_synth": 2.72,
        "nemotron_cc/medium_high": 0.82471,
        "nemotron_cc/medium": 3.38,
        "nemotron_cc/medium_low": 1.54,
        "nemotron_cc/low_actual": 0.70123,
        "nemotron_cc/low_synth": 0.62771,
    }
    steady = {**nemotron, "starcoderdata": 0.25}
    bridge = {**dclm, **steady}
    starling_hq = {
        "starcoderdata": 0.25,
        "proofpile_2": 0.25,
        "dolmino/flan": 0.017 * 10,
        "dolmino/pes2o": 0.0581 * 5,
        "dolmino/stackexchange": 0.0171 * 5,
        "dolmino/wiki": 0.00365 * 5,
        "all_math": 0.00422 * 10,
        "arxiv_markdownified": 0.0581 * 5,
        "stackexchange_custom": 0.0171 * 5,
        "wikipedia_markdown": 0.00365 * 5,
        "medu_science_qa": 0.0012 * 5,
        "finemath-3-plus": 0.034 * 5,
    }
    nemotron_total, starling_hq_total = sum(nemotron.values()), sum(starling_hq.values())
    starling = {
        **{k: v * 0.7 / nemotron_total for k, v in nemotron.items()},
        **{k: v * 0.3 / starling_hq_total for k, v in starling_hq.items()},
    }
    jellyfish = [(0, dclm), (740_500, v1)]
    phoenix = [*jellyfish, (820_000, bridge), (822_000, steady)]
    return {
        "kestrel": [(0, dclm)],
        "ocelot": [(0, dclm)],
        "jellyfish": jellyfish,
        "dessert_bad": [*jellyfish, (820_000, bad)],
        "dessert": [*jellyfish, (820_000, fixed)],
        "cooldown_v2": [(0, dclm), (740_500, v2)],
        "phoenix": phoenix,
        "starling": [*phoenix, (1_320_000, starling)],
        "deeper_starling": [*phoenix, (1_320_000, starling)],
    }


# Marin's names for one dataset in different mixtures, and the target (its tokenize step's name) each is.
SAME = {"dolmino_dclm": "dolmino/dclm", "flan": "dolmino/flan", "finemath-3-plus": "finemath_3_plus"}
SAME["all_math"] = "dolmino/all_math"


def component(name: str) -> str:
    name = SAME.get(name, name)
    return "dolmino/" + name if name.startswith("math/") else name


# -- the phases as train_lm gives them to levanter -------------------------------------------------


@pytest.fixture(scope="module")
def phases(tmp_path_factory):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    prefix = tmp_path_factory.mktemp("prefix")
    session = Session.open(REPO, prefix=str(prefix))
    session.load(["//experiments:tootsie_8b"])
    analysis = session.analyse()
    out = {}
    for name in PHASES:
        label = parse_label(PACKAGE + name)
        attrs = {k: thaw(v) for k, v in session.loaded.targets[label].attrs.items()}
        output = session.engine.output_paths[session.engine.canonicalize(analysis.step_of[label])]
        out[name] = (attrs, output, levanter_config(attrs, output))
    return prefix, out


def levanter_config(attrs: dict, output: str):
    """``train_lm``'s payload for these attributes (``rules/train.py``), through ``train_lm_config``."""
    from marinbuild.ml.train_config import train_lm_config

    data = {label.name: weight for label, weight in attrs["data"].items()}
    return train_lm_config(
        {
            "output_path": output,
            "run_id": os.path.basename(output),
            "components": {name: f"/caches/{name}" for name in data},
            "weights": mixture_weights(data, list(attrs["data_steps"] or ())),
            "validation": {label.name: f"/caches/{label.name}" for label in attrs["validation"]},
            "text_keys": {},
            "tokenizer": LLAMA3,
            "model": attrs["model"],
            "optimizer": attrs["optimizer"],
            "trainer": attrs["trainer"],
            "seed": attrs["seed"],
            "tracker": attrs["tracker"],
            "task_evals": list(attrs["task_evals"] or ()),
            "task_files": {},
            "require_accelerator": True,
            "distributed": False,
        },
        tokenizer=LLAMA3,
        start_step=0,
        lead=True,
    )


def lr(config, steps: list[int]) -> list[float]:
    schedule = config.optimizer.lr_scheduler(config.trainer.num_train_steps)
    return [float(schedule(step)) for step in steps]


def test_every_phase_has_marins_output_tpus_handoff_and_length(phases):
    prefix, found = phases
    for name, (attrs, output, config) in found.items():
        assert output == f"{prefix}/{OUTPUT[name]}", name
        assert attrs["resources"] == TPUS.get(name, {"tpu": "v4-2048"}), name
        handoff = attrs.get("initialize_from")
        assert ((handoff.label.name, handoff.step) if handoff else None) == HANDOFF.get(name), name
        assert config.trainer.num_train_steps == STEPS[name], name
        assert attrs["tracker"] == "wandb" and config.trainer.seed == 0


def test_model_trainer_and_checkpoints_are_default_trains(phases):
    import jmp
    from levanter.layers.rotary import DefaultRotaryEmbeddingsConfig, Llama3RotaryEmbeddingsConfig

    _, found = phases
    for name, (_, _, config) in found.items():
        model, trainer = config.model, config.trainer
        shape = (model.max_seq_len, model.hidden_dim, model.intermediate_dim, model.num_layers)
        assert shape + (model.num_heads, model.num_kv_heads) == (4096, 4096, 14336, 32, 32, 8), name
        # llama_8b_old_rotary (Kestrel) leaves levanter's default rotary; llama_8b is Llama 3's
        rope = DefaultRotaryEmbeddingsConfig if name == "kestrel" else Llama3RotaryEmbeddingsConfig
        assert type(model.rope) is rope, name
        assert trainer.mp == jmp.get_policy("p=f32,c=bfloat16"), name
        assert trainer.checkpointer.save_interval == timedelta(minutes=10)
        export = 2_000_000 if name.startswith("dessert") else 20_000
        assert trainer.checkpointer.keep == [{"every": export}] and config.hf_save_steps == export, name
        assert trainer.steps_per_eval == (10_000 if name == "kestrel" else 1000), name
        ema = trainer.model_averaging
        if name == "kestrel":
            assert ema is None and not trainer.allow_partial_checkpoint
            assert trainer.per_device_eval_parallelism == -1
        else:
            assert ema.beta == 0.995 and trainer.allow_partial_checkpoint, name
            assert trainer.per_device_eval_parallelism == 16, name
        assert config.z_loss_weight == (1e-4 if "starling" in name else 0.0), name
        assert config.data.tokenizer == LLAMA3


def test_task_evaluations_and_their_cadence(phases):
    _, found = phases
    for name, (_, _, config) in found.items():
        wanted = TASKS.get(name, CORE_TASKS)
        got = [(t.task, t.num_fewshot, t.task_alias) for t in config.eval_harness.task_spec] if wanted else []
        assert got == wanted and (config.eval_harness is None) == (not wanted), name
        assert config.eval_harness_steps == (1_000_000 if name.startswith("dessert") else 10_000), name


def test_optimizer_settings(phases):
    _, found = phases
    kestrel = found["kestrel"][2].optimizer
    assert (kestrel.learning_rate, kestrel.weight_decay, kestrel.warmup) == (1e-3, 0.05, 1000)
    assert (kestrel.cycle_length, kestrel.decay, kestrel.lr_schedule) == (10_000, 0.1, "inv")
    for name in PHASES[1:]:
        opt = found[name][2].optimizer
        # exp600 sets neither from phase 2 on: levanter's AdamConfig defaults
        assert (opt.weight_decay, opt.warmup, opt.lr_schedule) == (0.1, 0.01, "linear"), name
        assert (opt.beta1, opt.beta2, opt.epsilon, opt.max_grad_norm) == (0.9, 0.95, 1e-8, 1.0)
    phoenix = found["phoenix"][2].optimizer
    assert phoenix.cycle_length == [820_000, 1_180_000] and phoenix.rewarmup == 2000
    assert phoenix.decay == pytest.approx(79_500 / 820_000)
    starling = found["starling"][2].optimizer
    assert (starling.decay, starling.cycle_length) == (80_000, None)
    assert starling.min_lr_ratio == pytest.approx(0.01)
    deeper = found["deeper_starling"][2].optimizer
    assert (deeper.learning_rate, deeper.min_lr_ratio, deeper.decay) == (1.7e-5, 1.0, 0.0)


def test_learning_rates_at_given_steps(phases):
    _, found = phases
    cfg = {name: c for name, (_, _, c) in found.items()}
    # WSD-S: warmup to 1e-3 over 1,000 steps; each 10,000-step cycle decays over its last 1,000 steps with
    # "inv", lr / (1 + 9 t / 1000) (min_lr_ratio 0.1), the next cycle back at the peak
    at = [500, 5000, 9500, 9999, 10_000, 15_000]
    assert lr(cfg["kestrel"], at) == pytest.approx(
        [5e-4, 1e-3, 1e-3 / 5.5, 1e-3 / (1 + 9 * 0.999), 1e-3, 1e-3], rel=1e-5
    )
    assert lr(cfg["ocelot"], [660_001, 900_000]) == pytest.approx([1.7e-3, 1.7e-3], rel=1e-6)
    # Jellyfish: a linear decay from 1.7e-3 at step 740,500 to 1.7e-4 at 820,000
    jellyfish = [1.7e-3, (1.7e-3 + 1.7e-4) / 2, 1.7e-4]
    assert lr(cfg["jellyfish"], [740_500, 780_250, 820_000]) == pytest.approx(jellyfish, rel=1e-4)
    assert lr(cfg["cooldown_v2"], [780_250]) == lr(cfg["jellyfish"], [780_250])
    assert lr(cfg["dessert"], [830_000]) == pytest.approx([1.7e-4], rel=1e-6)
    # Phoenix: Jellyfish's schedule up to 820,000, then a 2,000-step re-warmup back to 1.7e-3
    assert lr(cfg["phoenix"], [780_250, 819_999]) == lr(cfg["jellyfish"], [780_250, 819_999])
    phoenix = [1.7e-4, (1.7e-4 + 1.7e-3) / 2, 1.7e-3, 1.7e-3]
    assert lr(cfg["phoenix"], [820_000, 821_000, 822_000, 1_320_000]) == pytest.approx(phoenix, rel=1e-4)
    # Starling: 1.7e-3 down to 1.7e-5 over its last 80,000 steps; Deeper Starling holds 1.7e-5
    starling = [1.7e-3, (1.7e-3 + 1.7e-5) / 2, 1.7e-5]
    assert lr(cfg["starling"], [1_320_000, 1_360_000, 1_400_000]) == pytest.approx(starling, rel=1e-3)
    assert lr(cfg["deeper_starling"], [1_400_000, 1_419_999]) == pytest.approx([1.7e-5, 1.7e-5], rel=1e-6)


def test_batch_sizes_at_given_steps(phases):
    from levanter.schedule import BatchSchedule

    _, found = phases
    for name, (_, _, config) in found.items():
        schedule = BatchSchedule(config.trainer.train_batch_size)
        steps = [0, 660_000, 660_001, 1_320_000, 1_320_001]
        wanted = [1024] * 5 if name == "kestrel" else [1024, 1024, 3072, 3072, 4096 if "starling" in name else 3072]
        assert [schedule.batch_size_at_step(s) for s in steps] == wanted, name


def test_mixtures_their_change_points_and_validation_sets(phases):
    _, found = phases
    for name, stages in marin_mixtures().items():
        config = found[name][2].data
        weights = config.train_weights
        got = weights if isinstance(weights, list) else [(0, weights)]
        assert [step for step, _ in got] == [step for step, _ in stages], name
        for (step, marin), (_, ours) in zip(stages, got, strict=True):
            expected = {component(k): v for k, v in marin.items() if v > 0}
            assert {k: v for k, v in ours.items() if v > 0} == pytest.approx(expected, rel=1e-12), (name, step)
        # default_train's validation sets: evaluated, never trained on
        validation = {f"paloma/{n}" for n in PALOMA} | {f"uncheatable_eval/{n}" for n in UNCHEATABLE}
        assert set(config.components) - set(got[0][1]) == validation, name
