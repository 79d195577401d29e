"""``--cluster`` resolution, ``--tpu``, and the Ray token checks, without a cluster (the real CLI in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from marinbuild.cluster.config import ClusterConfigError, dashboard_port, find_config, load_config, resolve_cluster
from marinbuild.cluster.submit import driver_resources
from marinbuild.run.ray_auth import RayAuthError, check_token, token_path

REPO = Path(__file__).resolve().parent.parent
CENTRAL2 = REPO / "infra" / "marinbuild-us-central2.yaml"


def local_config(folder: Path, name: str = "mine", extra: str = "") -> Path:
    path = folder / "infra" / f"{name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        textwrap.dedent(f"""\
        cluster_name: {name}-cluster
        provider:
          type: local
          head_ip: 10.1.2.3
          worker_ips: []
        """)
        + extra
    )
    return path


def test_a_name_is_looked_up_in_infra_as_marins_region_names_are():
    assert find_config("us-central2", [REPO]) == REPO / "infra" / "marinbuild-us-central2.yaml"
    assert find_config("marinbuild-us-west4", [REPO]) == REPO / "infra" / "marinbuild-us-west4.yaml"
    assert find_config(str(CENTRAL2), []) == CENTRAL2


def test_a_name_can_be_the_configs_cluster_name(tmp_path):
    local_config(tmp_path, "file-name")
    assert find_config("file-name-cluster", [tmp_path]) == tmp_path / "infra" / "file-name.yaml"


def test_an_unknown_cluster_lists_the_configs_there(tmp_path):
    with pytest.raises(ClusterConfigError, match="marinbuild-us-central2, marinbuild-us-west4"):
        find_config("mars-1", [REPO])
    with pytest.raises(ClusterConfigError, match="no such file"):
        find_config(str(tmp_path / "gone.yaml"), [REPO])


def test_a_local_provider_names_its_head_and_the_dashboard_port_comes_from_the_head_command(tmp_path):
    local_config(tmp_path, extra="head_start_ray_commands:\n  - ray start --head --dashboard-port=9123\n")
    address = resolve_cluster("mine", [tmp_path])
    assert (address.name, address.head_ip, address.dashboard_url) == (
        "mine-cluster",
        "10.1.2.3",
        "http://10.1.2.3:9123",
    )
    assert dashboard_port(load_config(CENTRAL2)) == 8265


def test_another_provider_is_asked_through_the_head_ip_lookup(tmp_path):
    seen = []

    def head_ip_of(path: Path) -> str:
        seen.append(path)
        return "34.5.6.7"

    address = resolve_cluster("us-central2", [REPO], head_ip_of=head_ip_of)
    assert [p.resolve() for p in seen] == [CENTRAL2] and address.dashboard_url == "http://34.5.6.7:8265"


def test_a_head_rays_sdk_cannot_find_is_one_line_naming_the_config():
    pytest.importorskip("ray")
    with pytest.raises(ClusterConfigError, match="marinbuild-us-central2.yaml") as raised:
        resolve_cluster("us-central2", [REPO])  # Ray's SDK itself: no cloud reachable from the tests
    assert "\n" not in str(raised.value) and "--address" in str(raised.value)


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "args, says",
    [
        (["submit", "--cluster", "mars-1", "--", "true"], "no cluster config of that name"),
        (["jobs", "list", "--cluster", "mars-1"], "no cluster config of that name"),
        (["submit", "--tpu", "v4-32", "--", "true"], "spans several hosts"),
        (["submit", "--tpu", "v9-8", "--", "true"], "unknown TPU type"),
        (["submit", "--entrypoint_resources", "{TPU: 4}", "--", "true"], "not JSON"),
    ],
)
def test_cli_mistakes_are_one_line_and_exit_2(args, says):
    done = cli(args, REPO)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr


def test_submit_to_a_cluster_whose_head_cannot_be_found_is_one_line():
    pytest.importorskip("ray")
    done = cli(["submit", "--cluster", "us-central2", "--", "true"], REPO)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "infra/marinbuild-us-central2.yaml" in lines[0] and "--address" in lines[0]


def test_tpu_places_the_driver_on_one_host_of_that_type():
    assert driver_resources(None, "v4-8") == {"TPU-v4-8-head": 1, "TPU": 4}
    assert driver_resources({"spot": 1}, "v5litepod-4") == {"spot": 1, "TPU-v5litepod-4-head": 1, "TPU": 4}
    assert driver_resources({"spot": 1}, None) == {"spot": 1}
    with pytest.raises(ValueError, match="several hosts"):
        driver_resources(None, "v4-32")


def test_the_token_file_is_checked_only_with_token_auth(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    check_token()  # nothing to check
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert token_path() == tmp_path / ".ray" / "auth_token"
    with pytest.raises(RayAuthError, match=rf"{tmp_path}/.ray/auth_token does not exist.*ray get-auth-token"):
        check_token()
    token = tmp_path / "tok"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    token.write_text("\n")
    with pytest.raises(RayAuthError, match=f"{token} is empty"):
        check_token()
    token.write_text("abc\n")
    check_token()
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "gone"))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "abc")  # Ray takes the variable first
    check_token()
