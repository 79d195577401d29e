"""TPU slice requests before anything runs: ``-n`` and ``why`` show the slices a step gets (type, slices, hosts,
chips); a bad slice count fails at load with one line; the local backend refuses several slices."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import repository_workspace

from marinbuild.core.resources import Resources, normalize, tpu, tpu_slice


def marinbuild(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def _workspace(tmp_path: Path, resources: str) -> Path:
    (tmp_path / "pipe").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (tmp_path / "pipe" / "steps.py").write_text("def write(config, output_path):\n    pass\n")
    (tmp_path / "pipe" / "BUILD.marin").write_text(
        'load("@marinbuild//rules:python.py", "python_step")\n'
        'python_step(\n    name = "lm",\n    fn = "pipe.steps:write",\n    config = {},\n'
        f"    resources = {resources},\n)\n"
    )
    return tmp_path


def test_multislice_shows_every_slice_in_a_dry_run_and_the_local_backend_refuses_it(tmp_path):
    ws = _workspace(tmp_path, 'tpu("v4-256", slices = 2)')
    dry = marinbuild("-n", "//pipe:lm", cwd=ws)
    assert dry.returncode == 0, dry.stderr
    assert "resources: TPU v4-256: 2 slices x 32 hosts x 4 chips (256 chips)" in dry.stdout
    proc = marinbuild("//pipe:lm", cwd=ws)
    assert proc.returncode == 2
    assert "which no single machine has" in proc.stderr and "--backend ray" in proc.stderr
    assert not (ws / "out").exists()


@pytest.mark.parametrize(
    ("resources", "where", "message"),
    [
        ('tpu("v4-8", slices = 0)', "pipe/BUILD.marin:6:17: tpu()", "slices must be a positive integer, got 0"),
        ('tpu("v3-32", slices = 2)', "pipe/BUILD.marin:6:17: tpu()", "cannot reserve several v3-32 slices"),
        ('{"cpu": 2, "slices": 2}', "nothing ran: pipe/lm", "slices = 2 needs a TPU type"),
    ],
)
def test_a_bad_slice_count_fails_with_one_line_before_anything_runs(tmp_path, resources, where, message):
    proc = marinbuild("//pipe:lm", cwd=_workspace(tmp_path, resources))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert where in line and message in line, line
    assert not (tmp_path / "out").exists()


def test_several_single_host_slices_are_coordinated_like_a_multi_host_slice():
    two = tpu("v4-8", slices=2)
    assert normalize({"tpu": "v4-8", "slices": 2}) == two
    # the step's task holds no chip (it coordinates), on a node that is not a spot VM
    assert two.multi_host and two.to_ray_options() == {"label_selector": {"ray.io/market-type": "!spot"}}
    assert two.hardware() == "TPU v4-8: 2 slices x 1 host x 4 chips (8 chips)"
    assert not tpu("v4-8").multi_host and normalize({"tpu": "v4-16", "slices": 1}) == tpu("v4-16")


def test_hardware_names_slice_type_slices_hosts_and_chips():
    assert tpu("v4-2048").hardware() == "TPU v4-2048: 1 slice x 256 hosts x 4 chips (1024 chips)"
    assert tpu("v4-8").hardware() == "TPU v4-8: 1 slice x 1 host x 4 chips (4 chips)"
    assert Resources(gpu=2).hardware() == "2 GPUs" and Resources(cpu=4).hardware() is None
    assert tpu_slice("v5litepod-16").topology == "4x4" and tpu_slice("v3-32").topology is None


def test_dry_run_and_why_show_the_slices_tootsie_8b_gets(tmp_path):
    """Every phase of the roll shows its TPUs under its row: one v4-2048, or several slices at once."""
    kestrel = "resources: TPU v5litepod-256: 2 slices x 64 hosts x 4 chips (512 chips)"
    ocelot = "resources: TPU v4-2048: 1 slice x 256 hosts x 4 chips (1024 chips)"
    dessert = "resources: TPU v4-128: 4 slices x 16 hosts x 4 chips (256 chips)"
    repo, prefix = repository_workspace(tmp_path / "repo"), tmp_path / "prefix"
    prefix.mkdir()
    dry = marinbuild("-n", "//experiments:tootsie_8b", "--prefix", str(prefix), cwd=repo)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    for step, shown in [("kestrel", kestrel), ("ocelot", ocelot), ("dessert_bad", dessert), ("dessert", dessert)]:
        row = next(i for i, line in enumerate(lines) if line.startswith(f"missing    experiments/tootsie/{step} "))
        assert lines[row + 1].strip() == shown
    assert sum(ocelot in line for line in lines) == 6  # the data steps ask for no TPU
    assert sum("resources: TPU" in line for line in lines) == 14  # nine phases, five evaluations
    why = marinbuild("why", "//experiments/tootsie:kestrel", "--prefix", str(prefix), cwd=repo)
    assert why.returncode == 0, why.stderr
    assert f"  {kestrel}" in why.stdout.splitlines()
    assert list(prefix.iterdir()) == []
