"""TPU slice requests before anything runs: multislice is refused at load with one line; ``-n`` and ``why``
show the slice a step gets (type, slices, hosts, chips)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import repository_workspace

from marinbuild.core.resources import Resources, normalize, tpu, tpu_slice

BUILD = """load("@marinbuild//rules:train.py", "train_lm")

train_lm(
    name = "lm",
    data = {},
    model = {},
    trainer = {},
    resources = tpu("v4-256", slices = 2),
)
"""


def marinbuild(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def test_multislice_is_refused_at_load_with_one_line(tmp_path):
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (tmp_path / "pipe" / "BUILD.marin").write_text(BUILD)
    proc = marinbuild("//pipe:lm", cwd=tmp_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("marinbuild: error: pipe/BUILD.marin:8:")
    assert "multislice training (slices=2) is not supported" in line and 'tpu("v4-512")' in line
    assert not (tmp_path / "out").exists()


def test_multislice_is_refused_in_every_form_of_a_request():
    with pytest.raises(ValueError, match="multislice training"):
        tpu("v4-16", slices=2)
    with pytest.raises(ValueError, match="multislice training"):
        normalize({"tpu": "v4-16", "slices": 4})
    with pytest.raises(ValueError, match="slices must be a positive integer"):
        Resources(tpu="v4-16", slices=0)
    assert normalize({"tpu": "v4-16", "slices": 1}) == tpu("v4-16")


def test_hardware_names_slice_type_slices_hosts_and_chips():
    assert tpu("v4-2048").hardware() == "TPU v4-2048: 1 slice x 256 hosts x 4 chips (1024 chips)"
    assert tpu("v4-8").hardware() == "TPU v4-8: 1 slice x 1 host x 4 chips (4 chips)"
    assert Resources(gpu=2).hardware() == "2 GPUs" and Resources(cpu=4).hardware() is None
    assert tpu_slice("v5litepod-16").topology == "4x4" and tpu_slice("v3-32").topology is None


def test_dry_run_and_why_show_the_slice_tootsie_8b_gets(tmp_path):
    shown = "resources: TPU v4-2048: 1 slice x 256 hosts x 4 chips (1024 chips)"
    repo, prefix = repository_workspace(tmp_path / "repo"), tmp_path / "prefix"
    prefix.mkdir()
    dry = marinbuild("-n", "//experiments:tootsie_8b", "--prefix", str(prefix), cwd=repo)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("missing    experiments/tootsie_8b "))
    assert lines[row + 1].strip() == shown
    assert sum(shown in line for line in lines) == 1  # the data steps ask for no TPU
    why = marinbuild("why", "//experiments:tootsie_8b", "--prefix", str(prefix), cwd=repo)
    assert why.returncode == 0, why.stderr
    assert f"  {shown}" in why.stdout.splitlines()
    assert list(prefix.iterdir()) == []
