"""The region guard on a real GCS API: fake-gcs-server started with its buckets in ``EUROPE-WEST4``, the worker's
region from ``$MARINBUILD_REGION``. A step whose config names a large path there fails before it starts, with one
line naming the path, both regions and the fix; the override, a small path and the same region pass."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fakegcs import running_server
from workspaces import write_workspace

from marinbuild.store.region import same_region

STEPS = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    open(os.path.join(config["output_path"], "done"), "w").close()
"""
BUILD = """load("@marinbuild//rules:python.py", "python_step")

python_step(name = "train", fn = "region_steps:write", config = {"data": {"train_urls": ["gs://eu-data/big"]}})
python_step(name = "small", fn = "region_steps:write", config = {"data": "gs://eu-data/small.txt"})
"""


def test_multi_region_buckets_serve_their_regions() -> None:
    assert same_region("europe-west4", "europe-west4") and same_region("europe-west4", "EU")
    assert same_region("us-central2", "us") and not same_region("us-central2", "eu")
    assert not same_region("us-central1", "us-central2")


def test_a_large_read_from_another_region_fails_before_the_step_starts(tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"region_steps.py": STEPS, "a/BUILD.marin": BUILD})
    with running_server(location="EUROPE-WEST4") as url:
        env = {**os.environ, "STORAGE_EMULATOR_HOST": url, "NO_GCE_CHECK": "true", "MARIN_MIRROR_BUDGET_GB": "0.00001"}
        env["PYTHONPATH"] = os.pathsep.join([str(ws), *sys.path])
        env.pop("MARIN_PREFIX", None)
        from marinbuild.store import gcs

        os.environ["STORAGE_EMULATOR_HOST"] = url
        try:
            filesystem = gcs.filesystem()
            filesystem.mkdir("eu-data")
            filesystem.pipe({"eu-data/big/part-0": b"x" * 20_000, "eu-data/small.txt": b"x" * 100})
        finally:
            del os.environ["STORAGE_EMULATOR_HOST"]

        def build(target: str, **extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "marinbuild", target],
                cwd=ws,
                env={**env, **extra},
                capture_output=True,
                text=True,
                timeout=300,
            )

        refused = build("//a:train", MARINBUILD_REGION="us-central1")
        assert refused.returncode == 1, refused.stderr
        (line,) = (x for x in refused.stderr.splitlines() if "would cross regions" in x)
        assert "config.data.train_urls[0]: gs://eu-data/big is in europe-west4 and this worker in us-central1" in line
        assert "mirrored(...)" in line and "MARIN_I_WILL_PAY_FOR_ALL_FEES=1" in line
        assert not (ws / "out/a").exists() or not any((ws / "out/a").glob("train-*/done"))

        assert build("//a:small", MARINBUILD_REGION="us-central1").returncode == 0  # under the budget
        assert build("//a:train", MARINBUILD_REGION="europe-west4").returncode == 0  # the same region
        (done,) = (ws / "out/a").glob("train-*/done")
        done.parent.joinpath(".executor_status").unlink()  # built again, across regions, paid for
        paid = build("//a:train", MARINBUILD_REGION="us-central1", MARIN_I_WILL_PAY_FOR_ALL_FEES="1")
        assert paid.returncode == 0, paid.stderr
