"""//experiments:tootsie_8b on a machine without TPUs: the dry run lists the whole roll (every phase with its
TPUs and Marin's output path), query shows it, why and cache status work, nothing is fetched, Marin's
outputs at their paths are found built, and a real build stops before running anything, saying what it needs.

None of this needs the ml extra: loading and analysing the ML rules never imports jax,
levanter, torch, tokenizers or matplotlib (checked here in a fresh interpreter).
tests/ml/test_tootsie_facts.py checks each phase's settings against Marin's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_tootsie_facts import HANDOFF

REPO = Path(__file__).resolve().parents[2]
TARGET = "//experiments:tootsie_8b"
ROLL = "//experiments/tootsie:"
PHASES = {  # Marin's output paths (exp600's override_output_path) and TPUs
    "kestrel": ("checkpoints/llama-8b-tootsie-0.001-19ad63", "TPU v5litepod-256: 2 slices x 64 hosts x 4 chips"),
    "ocelot": ("checkpoints/llama-8b-tootsie-phase2", "TPU v4-2048: 1 slice x 256 hosts x 4 chips"),
    "jellyfish": ("checkpoints/llama-8b-tootsie-phase3", "TPU v4-2048: 1 slice x 256 hosts x 4 chips"),
    "dessert_bad": ("checkpoints/llama-8b-tootsie-dessert", "TPU v4-128: 4 slices x 16 hosts x 4 chips"),
    "dessert": ("checkpoints/llama-8b-tootsie-dessert-v3", "TPU v4-128: 4 slices x 16 hosts x 4 chips"),
    "cooldown_v2": ("checkpoints/llama-8b-tootsie-cooldown-take-2", "TPU v4-2048: 1 slice x 256 hosts x 4 chips"),
    "phoenix": ("checkpoints/llama-8b-tootsie-adept-phoenix", "TPU v4-2048: 1 slice x 256 hosts x 4 chips"),
    "starling": ("checkpoints/tootsie-8b-sensible-starling", "TPU v4-2048: 1 slice x 256 hosts x 4 chips"),
    "deeper_starling": ("checkpoints/tootsie-8b-deeper-starling", "TPU v4-2048: 1 slice x 256 hosts x 4 chips"),
}
HANDOFFS = HANDOFF  # phase: (the phase whose checkpoint it starts from, its step), as exp600 says
EVALS = ["core_plus_leaderboard", "mmlu_0shot", "mmlu_5shot", "mmlu_pro_5shot", "generation"]


def marinbuild(*args: str, prefix: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args, "--prefix", str(prefix)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_dry_run_lists_every_phase_with_its_tpus_marins_path_and_handoff(tmp_path):
    text = marinbuild("-n", TARGET, prefix=tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    shown = {
        line.split()[1]: (line.split()[2], lines[i + 1]) for i, line in enumerate(lines) if line.startswith("missing")
    }
    for name, (path, tpus) in PHASES.items():
        output, resources = shown[f"experiments/tootsie/{name}"]
        assert output == f"{tmp_path}/{path}" and f"resources: {tpus}" in resources, (name, output, resources)
    froms = {line.split()[1]: lines[i + 2].strip() for i, line in enumerate(lines[:-2]) if "from:" in lines[i + 2]}
    assert froms == {
        f"experiments/tootsie/{p}": f"from: checkpoint step-{n} of experiments/tootsie/{src}"
        for p, (src, n) in HANDOFFS.items()
    }
    for name in EVALS:
        assert "resources: TPU v6e-8: 1 slice x 1 host x 8 chips" in shown[f"experiments/tootsie/base_eval/{name}"][1]
    proc = marinbuild("-n", TARGET, "--output", "json", prefix=tmp_path)
    plan = {p["step"]: p for p in json.loads(proc.stdout)["plan"]}
    # the datasets' caches are Marin's too
    assert plan["experiments/tootsie/dolma/arxiv"]["output_path"] == f"{tmp_path}/tokenized/dolma/arxiv-07a51f"
    assert plan["experiments/tootsie/paloma/c4_en"]["output_path"] == f"{tmp_path}/tokenized/paloma/c4_en-cf1f79"
    assert {p["state"] for p in plan.values()} == {"missing"}
    assert list(tmp_path.iterdir()) == []


def test_query_shows_the_roll_and_its_handoffs(tmp_path):
    deps = marinbuild("query", f"deps({TARGET})", "--output", "label_kind", prefix=tmp_path)
    assert deps.returncode == 0, deps.stderr
    kinds: dict[str, list[str]] = {}
    for line in deps.stdout.splitlines():
        kinds.setdefault(line.split()[0], []).append(line.split()[-1])
    assert kinds["group"] == [TARGET]
    assert sorted(kinds["train_lm"]) == sorted(ROLL + name for name in PHASES)
    assert len(kinds["eval_harness"]) == 5
    assert f"{ROLL}nemotron_cc/hq_synth" in kinds["tokenize"] and f"{ROLL}raw/dolmino-mix-1124" in kinds["download"]
    direct = marinbuild("query", f"deps({TARGET}, 1)", prefix=tmp_path).stdout.split()
    assert sorted(direct) == sorted([TARGET, *(ROLL + n for n in PHASES), *(f"{ROLL}base_eval/{n}" for n in EVALS)])
    # each phase depends on the phase whose checkpoint it starts from
    for phase, earlier in [("ocelot", "kestrel"), ("phoenix", "jellyfish"), ("deeper_starling", "starling")]:
        assert ROLL + earlier in marinbuild("query", f"deps({ROLL}{phase}, 1)", prefix=tmp_path).stdout.split()
    assert list(tmp_path.iterdir()) == []


def test_why_and_cache_status_of_a_phase(tmp_path):
    why = marinbuild("why", f"{ROLL}starling", prefix=tmp_path)
    assert why.returncode == 0, why.stderr
    assert "experiments/tootsie/starling: would run: never built" in why.stdout
    status = marinbuild("cache", "status", f"{ROLL}starling", "--output", "json", prefix=tmp_path)
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)
    assert row["state"] == "missing" and row["output_paths"] == [f"{tmp_path}/checkpoints/tootsie-8b-sensible-starling"]
    assert list(tmp_path.iterdir()) == []


def test_marins_outputs_at_their_paths_are_found_built(tmp_path):
    """Marin's executor marks a step done with SUCCESS in its output folder: at Marin's paths the roll's steps are
    those outputs, and what they were made from is not needed."""
    for path in ("checkpoints/tootsie-8b-deeper-starling", "tokenized/dolma/arxiv-07a51f"):
        (tmp_path / path).mkdir(parents=True)
        (tmp_path / path / ".executor_status").write_text("SUCCESS")
    for target in ("deeper_starling", "dolma/arxiv"):
        proc = marinbuild("-n", ROLL + target, "--output", "json", prefix=tmp_path)
        assert proc.returncode == 0, proc.stderr
        plan = json.loads(proc.stdout)["plan"]
        assert [(p["step"], p["state"]) for p in plan] == [(f"experiments/tootsie/{target}", "built")]


def test_a_local_build_refuses_before_running_anything(tmp_path):
    proc = marinbuild(TARGET, prefix=tmp_path)
    assert proc.returncode == 2
    message = proc.stderr
    assert "nothing ran" in message
    assert "TPU v4-2048 slice (1024 chips on 256 hosts)" in message
    assert "--backend ray" in message
    # no step started: no step folder exists (only the run's info file under experiments/)
    made = [p for p in tmp_path.rglob("*") if p.is_dir() and "-" in p.name]
    assert made == []


def test_loading_and_analysing_ml_targets_imports_no_ml_library():
    code = """
import sys
from marinbuild.analysis.session import Session
s = Session.open(".", prefix="/nonexistent-prefix-for-analysis")
s.load(["//experiments:tootsie_8b", "//experiments/quickstart:all"])
s.analyse()
heavy = sorted(m for m in ("jax", "jaxlib", "levanter", "haliax", "torch", "tokenizers", "matplotlib",
                           "transformers", "equinox", "optax", "huggingface_hub", "gcsfs") if m in sys.modules)
print(",".join(heavy))
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""
