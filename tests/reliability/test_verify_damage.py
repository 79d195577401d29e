"""``cache verify`` finds every damaged metadata file of a built step, checks the whole dependency closure, and
``--repair`` removes what nobody can use (torn leases and statuses, unparsable records, leftover leases)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import textwrap
import time

import pytest

from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path

STEPS_PY = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    parts = [open(os.path.join(dep, "out.txt")).read() for dep in config["deps"]] + [config["text"]]
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write("+".join(parts))
    return {"parts": len(parts)}
"""

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "rsteps:write", config = {"text": "A"})
python_step(name = "b", fn = "rsteps:write", config = {"text": "B"}, deps = [":a"])
python_step(name = "c", fn = "rsteps:write", config = {"text": "C"}, deps = [":b"])
"""


@pytest.fixture
def built(tmp_path) -> dict[str, str]:
    """A workspace whose //pipe:c (on b, on a) is built; each step's output folder by name."""
    root = tmp_path / "ws"
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "rsteps.py").write_text(STEPS_PY)
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    done = _cli(str(root), "//pipe:c")
    assert done.returncode == 0, done.stderr
    return {name: glob.glob(str(root / "out" / "pipe" / f"{name}-*"))[0] for name in "abc"} | {"ws": str(root)}


def _cli(ws: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ws, os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, capture_output=True, text=True, timeout=120, env=env
    )


def test_verify_checks_the_dependency_closure_and_every_metadata_file(built):
    Path = __import__("pathlib").Path
    Path(built["a"], ".executor_info").write_text("{not json")
    Path(built["b"], ".artifact.json").write_text("{not json")
    Path(lease_path(built["c"])).write_text('{"worker_id": "w", "timestamp": 1}}')
    found = _cli(built["ws"], "cache", "verify", "//pipe:c", "--dry_run")
    assert found.returncode == 1, found.stdout + found.stderr
    lines = found.stdout.splitlines()
    assert lines[-1].startswith("3 step(s): 0 ok, 3 damaged"), found.stdout
    assert f"{built['a']}/.executor_info: info file is not JSON" in found.stdout
    assert f"{built['b']}/.artifact.json: artifact file is not JSON" in found.stdout
    assert f"{lease_path(built['c'])}: lease file is not JSON" in found.stdout
    own = _cli(built["ws"], "cache", "verify", "//pipe:c", "--dry_run", "--no_deps")
    assert own.stdout.splitlines()[-1].startswith("1 step(s): 0 ok, 1 damaged"), own.stdout


def test_verify_repair_removes_what_nobody_can_use_and_says_so(built):
    Path = __import__("pathlib").Path
    Path(lease_path(built["c"])).write_text('{"worker_id": "w", "timestamp": 1}}')  # torn
    Path(lease_path(built["b"])).write_bytes(encode_lease(LeaseRecord("gone-runner", time.time() - 900)))  # leftover
    Path(built["a"], ".executor_status").write_text("FAILEDG")  # torn
    killed = Path(built["c"], ".tmp-.executor_status.0a1b2c3d4e5f")  # a writer killed before its rename
    killed.write_text("SUCC")
    os.utime(killed, (time.time() - 900, time.time() - 900))
    repaired = _cli(built["ws"], "cache", "verify", "//pipe:c", "--repair")
    assert repaired.returncode == 1, repaired.stdout + repaired.stderr  # it found damage
    out = repaired.stdout
    assert f"-> removed the unparsable lease {lease_path(built['c'])}" in out
    assert f"-> removed the leftover lease {lease_path(built['b'])}" in out
    assert "-> marked not built: the next build reruns it" in out
    assert f"-> removed {killed.name}, a temporary file left by a writer that was killed" in out
    assert not killed.exists()
    assert not os.path.exists(lease_path(built["c"])) and not os.path.exists(lease_path(built["b"]))
    assert not os.path.exists(st.status_path(built["a"]))
    clean = _cli(built["ws"], "cache", "verify", "//pipe:c")
    assert clean.returncode == 0, clean.stdout  # nothing damaged is left: a is not built, the next build reruns it
    assert clean.stdout.splitlines()[-1].startswith("3 step(s): 2 ok, 0 damaged"), clean.stdout
    rebuilt = _cli(built["ws"], "//pipe:a")  # (//pipe:c is built: building it would not need a)
    assert rebuilt.returncode == 0, rebuilt.stderr
    final = _cli(built["ws"], "cache", "verify", "//pipe:c")
    assert final.returncode == 0 and final.stdout.splitlines()[-1].startswith("3 step(s): 3 ok"), final.stdout


def test_dry_run_and_repair_together_is_a_usage_error(built):
    done = _cli(built["ws"], "cache", "verify", "//pipe:c", "--dry_run", "--repair")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
