"""A real local Ray cluster for tests and benchmarks: nodes as `ray start --block` processes we own.

``start_cluster`` runs ``ray start --head`` on 127.0.0.1 with every port picked free, in a
temporary folder of its own, and connects this process to it (or, with ``auth_token_path``, starts
the head with Ray's token authentication, ``RAY_AUTH_MODE=token`` and that token file, and only
waits for its job API: this process keeps its own Ray without auth); ``add_node`` starts more
nodes with custom resources (a TPU host, a spot VM), node labels and environment variables
(``add_tpu_slice``: the hosts of a fake multi-host TPU slice, as Ray sees real ones), and
``kill_node`` SIGKILLs one (a preempted VM). Each node is a ``ray start --block`` process in a new session, so
``stop`` kills exactly those process groups (never ``ray stop``, which would stop every
Ray on the machine).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
RAY_START = """
import sys
import ray._private.ray_constants as constants
import ray._private.services as services

constants.ENABLE_RAY_CLUSTER = True  # let a node join a head on this machine
services.resolve_ip_for_localhost = lambda host: host  # and keep --node-ip-address=127.0.0.1 as given
from ray.scripts.scripts import main

sys.argv[0] = "ray"
main()
"""
"""`ray start` for nodes on 127.0.0.1 only.

Ray's switch RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 keeps every process on loopback, but also
refuses `ray start --address`; with 1, Ray swaps 127.0.0.1 for this machine's address. So
every process of the cluster (workers, job drivers) gets 0, and `ray start` alone is let
through with 127.0.0.1 kept.
"""
NODE_ENV = {
    "RAY_AUTH_MODE": "disabled",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    # Notice a dead node within a few seconds (the preemption test kills one).
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_env(auth_token_path: str | None = None) -> dict[str, str]:
    """The environment of the cluster's node processes, and of driver processes that use it.

    With ``auth_token_path``: Ray's token authentication on, with the token in that file."""
    env = dict(os.environ)
    env.update(NODE_ENV)
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    if auth_token_path is not None:
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": auth_token_path})
    env.pop("RAY_ADDRESS", None)
    # Workers import the tests' step modules, and `python` in a job is this virtualenv's.
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(TESTS), *filter(None, [env.get("PYTHONPATH")])])
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def _port_flags() -> list[str]:
    return [
        f"--node-manager-port={free_port()}",
        f"--object-manager-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
    ]


@dataclass
class Node:
    proc: subprocess.Popen
    resources: dict[str, float]
    node_id: str | None = None


@dataclass
class RayCluster:
    address: str
    dashboard_url: str
    temp_dir: str
    nodes: list[Node] = field(default_factory=list)
    auth_token_path: str | None = None
    """The token file of a cluster started with token authentication."""

    @property
    def head(self) -> Node:
        return self.nodes[0]

    def add_node(
        self,
        resources: dict[str, float],
        num_cpus: int = 1,
        timeout: float = 120,
        labels: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> Node:
        """Start a worker node advertising ``resources`` and ``labels``, its processes with ``env`` added to their
        environment; return once the cluster sees it. A node that has not joined in ``timeout`` seconds (a busy
        machine, a port taken between its choice and its use) is stopped and started once more."""
        try:
            return self._add_node(resources, num_cpus, timeout, labels, env)
        except RuntimeError:
            return self._add_node(resources, num_cpus, timeout, labels, env)

    def _add_node(
        self,
        resources: dict[str, float],
        num_cpus: int,
        timeout: float,
        labels: dict[str, str] | None,
        env: dict[str, str] | None,
    ) -> Node:
        import ray

        before = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        label_flags = [f"--labels={','.join(f'{k}={v}' for k, v in labels.items())}"] if labels else []
        node = _start(
            [
                sys.executable,
                "-c",
                RAY_START,
                "start",
                f"--address={self.address}",
                "--node-ip-address=127.0.0.1",
                f"--num-cpus={num_cpus}",
                f"--resources={json.dumps(resources)}",
                *label_flags,
                "--block",
                "--disable-usage-stats",
                *_port_flags(),
            ],
            resources,
            env=env,
        )
        self.nodes.append(node)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            new = [
                n
                for n in ray.nodes()
                if n["Alive"]
                and n["NodeID"] not in before
                and all(n["Resources"].get(k) == v for k, v in resources.items())
            ]
            if new:
                node.node_id = new[0]["NodeID"]
                return node
            if node.proc.poll() is not None:
                break
            time.sleep(0.2)
        _kill_group(node.proc, signal.SIGKILL)
        self.nodes.remove(node)
        raise RuntimeError(f"Ray node with {resources} did not join ({self.temp_dir})")

    def add_tpu_slice(
        self, tpu_type: str, name: str, hosts: int, chips_per_host: int = 4, num_cpus: int = 1
    ) -> list[Node]:
        """Start the ``hosts`` nodes of a fake multi-host TPU slice ``name`` of type ``tpu_type`` (``v4-16``).

        Each node looks to Ray as a host of a real slice does: ``TPU`` chips, ``TPU-<type>-head`` on worker 0,
        the labels ``ray.util.tpu`` reads (slice name, worker id, topology, pod type) and the environment Ray's
        TPU support reads on GKE (``TPU_NAME``, ``TPU_WORKER_ID``, ``TPU_ACCELERATOR_TYPE``)."""
        from marinbuild.core.resources import tpu_slice

        s = tpu_slice(tpu_type)
        nodes = []
        for worker in range(hosts):
            resources: dict[str, float] = {"TPU": chips_per_host}
            if worker == 0:
                resources[s.head_resource] = 1
            labels = {
                "ray.io/tpu-slice-name": name,
                "ray.io/tpu-worker-id": str(worker),
                "ray.io/tpu-topology": s.topology or "",
                "ray.io/tpu-pod-type": s.type,
            }
            env = {"TPU_NAME": name, "TPU_WORKER_ID": str(worker), "TPU_ACCELERATOR_TYPE": s.type}
            nodes.append(self.add_node(resources, num_cpus=num_cpus, labels=labels, env=env))
        return nodes

    def remove_nodes(self, nodes: list[Node]) -> None:
        """Stop ``nodes`` (their process groups) and forget them."""
        for node in nodes:
            _kill_group(node.proc, signal.SIGKILL)
            self.nodes.remove(node)

    def kill_node(self, node: Node) -> None:
        """SIGKILL the node's raylet and workers at once (a preempted VM)."""
        _kill_group(node.proc, signal.SIGKILL)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            _kill_group(node.proc, signal.SIGTERM)
        deadline = time.monotonic() + 3
        for node in self.nodes:
            try:
                node.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            _kill_group(node.proc, signal.SIGKILL)  # whatever of the group did not exit
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _start(
    args: list[str], resources: dict[str, float], auth_token_path: str | None = None, env: dict[str, str] | None = None
) -> Node:
    proc = subprocess.Popen(
        args,
        env={**node_env(auth_token_path), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return Node(proc, resources)


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the node's own session: `ray start` and everything it started
    except ProcessLookupError:
        pass
    if sig == signal.SIGKILL:
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def start_cluster(
    num_cpus: int = 2,
    dashboard: bool = True,
    timeout: float = 90,
    auth_token_path: str | None = None,
    resources: dict[str, float] | None = None,
) -> RayCluster:
    """Start a head node (advertising ``resources`` too) on free ports in a temporary folder of its own.

    Without ``auth_token_path`` this process connects to it (``ray.init``). With it, the head runs
    with ``RAY_AUTH_MODE=token`` and the token in that file (written by the caller); this process
    does not connect (its Ray reads the auth mode once, and other clusters of the test session run
    without auth) and the call returns once the dashboard's job API answers that token."""
    temp_dir = tempfile.mkdtemp(prefix="mbray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port, dashboard_port = free_port(), free_port()
    head = _start(
        [
            sys.executable,
            "-c",
            RAY_START,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--ray-client-server-port={free_port()}",
            f"--include-dashboard={str(dashboard).lower()}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard_port}",
            f"--num-cpus={num_cpus}",
            f"--temp-dir={temp_dir}",
            "--block",
            "--disable-usage-stats",
            *_port_flags(),
            *([f"--resources={json.dumps(resources)}"] if resources else []),
        ],
        dict(resources or {}),
        auth_token_path,
    )
    cluster = RayCluster(
        f"127.0.0.1:{port}", f"http://127.0.0.1:{dashboard_port}", temp_dir, [head], auth_token_path=auth_token_path
    )
    try:
        if auth_token_path is not None:
            _wait_for_job_api(cluster, Path(auth_token_path).read_text().strip(), timeout)
        else:
            _connect(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _connect(cluster: RayCluster, timeout: float) -> None:
    import ray

    for var in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED"):
        os.environ.setdefault(var, NODE_ENV[var])
    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
            break
        except Exception:
            if time.monotonic() > deadline or cluster.head.proc.poll() is not None:
                raise
            time.sleep(0.5)
    cluster.head.node_id = ray.get_runtime_context().get_node_id()


def _wait_for_job_api(cluster: RayCluster, token: str, timeout: float) -> None:
    """Until the head's job API lists jobs for a client that presents ``token``."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{cluster.dashboard_url}/api/jobs/", headers={"Authorization": f"Bearer {token}"})
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline or cluster.head.proc.poll() is not None:
            raise RuntimeError(f"the Ray head with token authentication did not start ({cluster.temp_dir})")
        time.sleep(0.5)
