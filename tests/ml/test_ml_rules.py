"""The ML rules without training: load-time checks of their configs, raw_data and train_tokenizer builds.

These need no levanter (train_tokenizer needs HF ``tokenizers``, skipped without it) and take seconds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from marinbuild.ml.configs import LmModel, batch_schedule

HEADER = """
load("@marinbuild//rules:data.py", "raw_data")
load("@marinbuild//rules:tokenizer.py", "train_tokenizer")
load("@marinbuild//rules:tokenize.py", "tokenize")
load("@marinbuild//rules:train.py", "train_lm")
"""


def workspace(root: Path, build: str) -> Path:
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "pipe" / "BUILD.marin").write_text(HEADER + textwrap.dedent(build))
    return root


def marinbuild(root: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=root, capture_output=True, text=True, timeout=120, env=env
    )


TRAIN = """
tokenize(name = "tok", tokenizer_name = "gpt2")
train_lm(
    name = "lm",
    data = {{":tok": 1.0}},
    model = {model},
    trainer = {{"batch_size": 8, "num_train_steps": 10}},
    resources = {resources},
)
"""


@pytest.mark.parametrize(
    ("model", "resources", "message"),
    [
        ('{"hidden_dim": 64, "num_layer": 2}', "{}", "unknown field 'num_layer' for LmModel"),
        ('{"hidden_dim": 64, "num_heads": 5}', "{}", "hidden_dim 64 is not divisible by num_heads 5"),
        ('{"type": "llama9"}', "{}", "unknown model type 'llama9'"),
        ("{}", 'tpu("v9-8")', "unknown TPU type 'v9-8'"),
        (
            '{"hidden_dim": "wide"}',
            "{}",
            "attribute 'model' of train_lm(name='lm'): hidden_dim: expected an int, got str",
        ),
    ],
)
def test_bad_train_lm_attributes_are_located_load_errors(tmp_path, model, resources, message):
    root = workspace(tmp_path / "ws", TRAIN.format(model=model, resources=resources))
    proc = marinbuild(root, "-n", "//pipe:lm")
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "pipe/BUILD.marin:" in proc.stderr


def test_tpu_helper_and_versions(tmp_path):
    root = workspace(tmp_path / "ws", TRAIN.format(model="{}", resources='tpu("v4-8")'))
    first = marinbuild(root, "-n", "//pipe:lm", "--output", "json")
    assert first.returncode == 0, first.stderr
    # resources are not versioned: another slice type, same output path
    (root / "pipe" / "BUILD.marin").write_text(HEADER + TRAIN.format(model="{}", resources='tpu("v5litepod-8")'))
    second = marinbuild(root, "-n", "//pipe:lm", "--output", "json")
    assert json.loads(first.stdout)["targets"] == json.loads(second.stdout)["targets"]
    # the model is: one field changes the path
    (root / "pipe" / "BUILD.marin").write_text(HEADER + TRAIN.format(model='{"num_layers": 2}', resources="{}"))
    third = marinbuild(root, "-n", "//pipe:lm", "--output", "json")
    assert json.loads(first.stdout)["targets"] != json.loads(third.stdout)["targets"]
    # a local build of a TPU step refuses before running anything
    (root / "pipe" / "BUILD.marin").write_text(HEADER + TRAIN.format(model="{}", resources='tpu("v4-8")'))
    refused = marinbuild(root, "//pipe:lm")
    assert refused.returncode == 2
    assert "needs a TPU v4-8 slice (4 chips on 1 host) but this machine has no TPU" in refused.stderr
    assert not (root / "out" / "pipe").exists()


def test_config_dataclasses():
    assert batch_schedule(16) == [(0, 16)]
    assert batch_schedule([[0, 1024], [660001, 3072]]) == [(0, 1024), (660001, 3072)]
    with pytest.raises(ValueError, match="starts at step 0"):
        batch_schedule([[5, 4]])
    # the quickstart model, and Llama 3 8B with its tokenizer's vocabulary, as levanter counts them
    assert (
        LmModel(
            seq_len=128, hidden_dim=64, intermediate_dim=192, num_layers=2, num_heads=4, num_kv_heads=4
        ).parameter_count(512)
        == 172_352
    )
    assert (
        LmModel(
            seq_len=4096, hidden_dim=4096, intermediate_dim=14336, num_layers=32, num_heads=32, num_kv_heads=8
        ).parameter_count(128_256)
        == 8_030_261_248
    )


@pytest.mark.skipif(importlib.util.find_spec("tokenizers") is None, reason="HF tokenizers is not installed (ml extra)")
def test_raw_data_and_train_tokenizer(tmp_path):
    root = workspace(
        tmp_path / "ws",
        """
        raw_data(name = "docs", srcs = glob(["data/*.jsonl"]))
        train_tokenizer(name = "tokenizer", data = [":docs"], vocab_size = 300)
    """,
    )
    (root / "pipe" / "data").mkdir()
    lines = [json.dumps({"text": f"the cat number {i} sat on the mat and the dog ran"}) for i in range(200)]
    (root / "pipe" / "data" / "a.jsonl").write_text("\n".join(lines) + "\n")
    proc = marinbuild(root, "//pipe:tokenizer")
    assert proc.returncode == 0, proc.stderr
    raw = next((root / "out" / "pipe").glob("docs-*"))
    manifest = json.loads((raw / "manifest.json").read_text())
    assert manifest["documents"] == 200 and manifest["urls"] == []
    assert [Path(f).relative_to(raw).as_posix() for f in manifest["files"]] == ["files/data/a.jsonl"]
    tok = next((root / "out" / "pipe").glob("tokenizer-*"))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tok / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 300
    assert tokenizer.decode(tokenizer.encode("the cat sat").ids) == "the cat sat"
    config = json.loads((tok / "tokenizer_config.json").read_text())
    assert {tokenizer.token_to_id(config[k]) for k in ("bos_token", "eos_token", "pad_token")} == {0, 1, 2}
    # editing the data file rebuilds both; an identical rebuild runs nothing
    assert "0 built" in marinbuild(root, "//pipe:tokenizer").stdout
    (root / "pipe" / "data" / "a.jsonl").write_text("\n".join(lines[:100]) + "\n")
    again = marinbuild(root, "//pipe:tokenizer")
    assert again.returncode == 0 and "2 built" in again.stdout, again.stdout


def test_quickstart_corpus_is_what_its_generator_makes():
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run(
        [sys.executable, str(repo / "experiments" / "quickstart" / "make_corpus.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    sizes = [p.stat().st_size for p in (repo / "experiments" / "quickstart" / "data").iterdir()]
    assert 50_000 < sum(sizes) < 1_000_000
