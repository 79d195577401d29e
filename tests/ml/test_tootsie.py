"""//experiments:tootsie_8b on a machine without TPUs: dry run, query, why and cache status work,
nothing is fetched, and a real build stops before running anything, saying what it needs.

None of this needs the ml extra: loading and analysing the ML rules never imports jax,
levanter, torch, tokenizers or matplotlib (checked here in a fresh interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGET = "//experiments:tootsie_8b"


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


def test_dry_run_lists_the_pipeline_and_writes_nothing(tmp_path):
    proc = marinbuild("-n", TARGET, "--output", "json", prefix=tmp_path)
    assert proc.returncode == 0, proc.stderr
    plan = {p["step"]: p["state"] for p in json.loads(proc.stdout)["plan"]}
    assert set(plan) == {
        f"experiments/{n}"
        for n in (
            "tootsie_8b",
            "dclm_baseline",
            "starcoderdata",
            "proofpile_2",
            "dclm_baseline_raw",
            "starcoderdata_raw",
            "proofpile_2_raw",
            "proofpile_2_train",
        )
    }
    assert set(plan.values()) == {"missing"}
    assert list(tmp_path.iterdir()) == []


def test_query_why_and_cache_status(tmp_path):
    deps = marinbuild("query", f"deps({TARGET})", "--output", "label_kind", prefix=tmp_path)
    assert deps.returncode == 0, deps.stderr
    kinds = {line.split()[-1]: line.split()[0] for line in deps.stdout.splitlines()}
    assert kinds[TARGET] == "train_lm"
    assert kinds["//experiments:dclm_baseline"] == "tokenize"
    assert kinds["//experiments:proofpile_2_raw"] == "download"
    assert kinds["//experiments:proofpile_2_train"] == "raw_data"
    assert len(kinds) == 8
    direct = marinbuild("query", f"deps({TARGET}, 1)", prefix=tmp_path)
    assert sorted(direct.stdout.split()) == [
        "//experiments:dclm_baseline",
        "//experiments:proofpile_2",
        "//experiments:starcoderdata",
        TARGET,
    ]
    why = marinbuild("why", TARGET, prefix=tmp_path)
    assert why.returncode == 0, why.stderr
    assert "experiments/tootsie_8b: would run: never built" in why.stdout
    status = marinbuild("cache", "status", TARGET, "--output", "json", prefix=tmp_path)
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)
    assert row["label"] == TARGET and row["state"] == "missing"
    assert [Path(p).name.rsplit("-", 1)[0] for p in row["output_paths"]] == ["tootsie_8b"]
    assert list(tmp_path.iterdir()) == []


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
