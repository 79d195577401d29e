"""The Ray backend tests share one real local Ray cluster for the whole session (see raycluster.py).

A head node on 127.0.0.1 (2 CPUs, with its dashboard, for job submission) plus a second node
advertising a one-host TPU slice (``TPU: 4``, ``TPU-v4-8-head: 1``); this test process is
their driver. Teardown kills exactly the process groups of those nodes.
"""

from __future__ import annotations

import pytest
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
