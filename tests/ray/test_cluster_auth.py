"""``submit``, ``jobs`` and the Ray backend against a real local Ray cluster with token authentication.

The cluster of this module is its own (the other Ray tests keep theirs without auth): a head on
127.0.0.1 started with ``RAY_AUTH_MODE=token`` and a token file, advertising one v4-8 TPU host
(``TPU: 4``, ``TPU-v4-8-head: 1``) so ``--tpu v4-8`` has somewhere to go. Every command runs
as the real CLI in a subprocess, which reads the token the way a user's shell gives it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from raycluster import node_env, start_cluster

pytestmark = pytest.mark.timeout(240)

TOKEN = uuid.uuid4().hex + uuid.uuid4().hex

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "steps:write", config = {"text": "A"})
"""

STEPS_PY = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(config["text"])
"""

HOLDS_TPU_HEAD = """
import ray
ray.init(log_to_driver=False)
print("free TPU-v4-8-head:", ray.available_resources().get("TPU-v4-8-head", 0.0), flush=True)
"""


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory):
    pytest.importorskip("ray")
    token_file = tmp_path_factory.mktemp("token") / "auth_token"
    token_file.write_text(TOKEN)
    cluster = start_cluster(
        num_cpus=2, dashboard=True, auth_token_path=str(token_file), resources={"TPU": 4, "TPU-v4-8-head": 1}
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def ws(token_cluster, tmp_path_factory) -> Path:
    """A workspace in git (for GIT_COMMIT) with a BUILD target, and infra/marinbuild-local.yaml naming the cluster."""
    root = tmp_path_factory.mktemp("ws")
    (root / "pipe").mkdir()
    (root / "infra").mkdir()
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "steps.py").write_text(STEPS_PY)
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    port = token_cluster.dashboard_url.rsplit(":", 1)[1]
    (root / "infra" / "marinbuild-local.yaml").write_text(
        textwrap.dedent(f"""\
        cluster_name: marinbuild-local
        provider:
          type: local
          head_ip: 127.0.0.1
          worker_ips: []
        auth:
          ssh_user: {os.environ.get("USER", "ray")}
        head_start_ray_commands:
          - ray start --head --port=6379 --dashboard-host=0.0.0.0 --dashboard-port={port}
        """)
    )
    (root / ".gitignore").write_text("out/\n")
    git = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "ws"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    return root


def env_with(token_file: str | Path | None, home: Path, mode: str = "token") -> dict[str, str]:
    """A shell's environment: Ray's auth mode and token file (None: Ray's default ~/.ray/auth_token)."""
    env = node_env()
    env["HOME"] = str(home)
    env["RAY_AUTH_MODE"] = mode
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    if token_file is not None:
        env["RAY_AUTH_TOKEN_PATH"] = str(token_file)
    return env


@pytest.fixture
def good_env(token_cluster, tmp_path) -> dict[str, str]:
    return env_with(token_cluster.auth_token_path, tmp_path)


def marinbuild(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def wait_for(condition, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.5)


def test_submit_by_cluster_name_with_the_token_runs_the_job_on_the_tpu_host_with_git_commit(ws, good_env):
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ws, capture_output=True, text=True).stdout.strip()
    code = "import os; print('GIT_COMMIT=' + os.environ['GIT_COMMIT'], 'X=' + os.environ['X'])" + HOLDS_TPU_HEAD
    done = marinbuild(
        [
            "submit",
            "--cluster",
            "local",
            "--tpu",
            "v4-8",
            "--submission_id",
            "mb-auth-ok",
            "-e",
            "X",
            "y",
            "--",
            "python",
            "-c",
            code,
        ],
        ws,
        good_env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "mb-auth-ok"
    assert f"GIT_COMMIT={head} X=y" in done.stdout
    assert "free TPU-v4-8-head: 0.0" in done.stdout  # the driver holds the TPU host's head resource
    assert "SUCCEEDED" in done.stderr


def test_entrypoint_resources_place_the_driver_and_address_wins_over_cluster(token_cluster, ws, good_env):
    done = marinbuild(
        [
            "submit",
            "--address",
            token_cluster.dashboard_url,
            "--cluster",
            "no-such-cluster",
            "--entrypoint_resources",
            '{"TPU-v4-8-head": 1}',
            "--entrypoint_num_cpus",
            "1",
            "--",
            "python",
            "-c",
            HOLDS_TPU_HEAD,
        ],
        ws,
        good_env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "free TPU-v4-8-head: 0.0" in done.stdout  # the cluster's one is the driver's (else 1.0 would be free)


@pytest.mark.parametrize("case", ["missing file", "default path missing", "wrong token", "auth off here"])
def test_submit_and_jobs_without_the_right_token_say_which_file_and_how_to_get_one(token_cluster, ws, tmp_path, case):
    wrong = tmp_path / "wrong_token"
    wrong.write_text(uuid.uuid4().hex + uuid.uuid4().hex)
    env, read = {
        "missing file": (env_with(tmp_path / "nope", tmp_path), str(tmp_path / "nope")),
        "default path missing": (env_with(None, tmp_path), str(tmp_path / ".ray" / "auth_token")),
        "wrong token": (env_with(wrong, tmp_path), str(wrong)),
        "auth off here": (env_with(None, tmp_path, mode="disabled"), "RAY_AUTH_MODE=token"),
    }[case]
    for args in (
        ["submit", "--cluster", "infra/marinbuild-local.yaml", "--", "python", "-c", "print(1)"],
        ["jobs", "list", "--address", token_cluster.dashboard_url],
    ):
        done = marinbuild(args, ws, env)
        assert done.returncode == 2, done.stdout + done.stderr
        line = one_line(done.stderr)
        assert read in line and "ray get-auth-token" in line, line


def test_jobs_list_status_logs_and_stop_on_a_real_job(token_cluster, ws, good_env):
    job = f"mb-long-{uuid.uuid4().hex[:6]}"
    long_running = "import time; print('started', flush=True); time.sleep(600)"
    done = marinbuild(
        [
            "submit",
            "--cluster",
            "marinbuild-local",
            "--no_wait",
            "--submission_id",
            job,
            "--",
            "python",
            "-c",
            long_running,
        ],
        ws,
        good_env,
    )
    assert done.returncode == 0 and done.stdout.strip() == job, done.stderr

    listed = marinbuild(["jobs", "list", "--cluster", "local", "--output", "json"], ws, good_env)
    assert listed.returncode == 0, listed.stderr
    assert job in [row["submission_id"] for row in json.loads(listed.stdout)]
    table = marinbuild(["jobs", "list", "--cluster", "local"], ws, good_env)
    assert table.returncode == 0 and "SUBMISSION ID" in table.stdout and job in table.stdout, table.stderr

    def logs() -> str:
        got = marinbuild(["jobs", "logs", job, "--cluster", "local"], ws, good_env)
        assert got.returncode == 0, got.stderr
        return got.stdout

    assert "started" in wait_for(lambda: "started" in logs() and logs(), "the job's output in its logs")
    status = marinbuild(["jobs", "status", job, "--cluster", "local", "--output", "json"], ws, good_env)
    assert status.returncode == 0 and json.loads(status.stdout)["status"] == "RUNNING", status.stdout + status.stderr

    stop = marinbuild(["jobs", "stop", job, "--cluster", "local"], ws, good_env)
    assert stop.returncode == 0, stop.stderr

    def stopped() -> bool:
        got = marinbuild(["jobs", "status", job, "--cluster", "local"], ws, good_env)
        assert got.returncode == 0, got.stderr
        return "STOPPED" in got.stdout

    wait_for(stopped, "the job STOPPED")

    unknown = marinbuild(["jobs", "status", "no-such-job", "--cluster", "local"], ws, good_env)
    assert unknown.returncode == 2 and "no job no-such-job" in one_line(unknown.stderr)


def test_jobs_logs_follow_returns_when_the_job_ends(token_cluster, ws, good_env):
    done = marinbuild(
        [
            "submit",
            "--cluster",
            "local",
            "--no_wait",
            "--",
            "python",
            "-c",
            "import time; time.sleep(2); print('the end')",
        ],
        ws,
        good_env,
    )
    assert done.returncode == 0, done.stderr
    followed = marinbuild(["jobs", "logs", done.stdout.strip(), "-f", "--cluster", "local"], ws, good_env)
    assert followed.returncode == 0 and "the end" in followed.stdout, followed.stdout + followed.stderr


def test_the_ray_backend_connects_with_the_token_and_says_which_file_without_it(token_cluster, ws, good_env, tmp_path):
    built = marinbuild(
        ["//pipe:a", "--backend", "ray", "--ray_address", token_cluster.address, "--prefix", str(tmp_path / "out")],
        ws,
        good_env,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert (next((tmp_path / "out" / "pipe").glob("a-*")) / "out.txt").read_text() == "A"

    missing = tmp_path / "no_token_here"
    refused = marinbuild(
        ["//pipe:a", "--backend", "ray", "--ray_address", token_cluster.address, "--prefix", str(tmp_path / "out2")],
        ws,
        env_with(missing, tmp_path),
    )
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("marinbuild: error:")]
    assert len(errors) == 1 and str(missing) in errors[0] and "ray get-auth-token" in errors[0], refused.stderr
