"""``tokenize`` on the Ray backend: its shards run as Ray tasks on both nodes of the session's real local cluster,
and the consolidated cache holds exactly the token ids levanter's own single-process builder writes for the
same files; its progress reports reach the driver's events; a node that joins mid-build gets a worker that
builds shards. The build is the real CLI in a child process, a driver of that cluster.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from raycluster import node_env
from tokenize_ws import TokenizeWorkspace, reference_rows, shard_log, stories, token_rows, toy_tokenizer, write_docs

pytest.importorskip("levanter")
pytestmark = pytest.mark.ml  # levanter tokenizes (tests/ray marks it ray)


PINNED = '    shard_resources = {"cpu": 1, "tokslot": 1},\n    resources = {"cpu": 1, "tokstep": 1},\n'
"""Shards on nodes with a ``tokslot``, the step's own task on the one node with a ``tokstep``."""


def _workspace(tmp_path, asks: str) -> TokenizeWorkspace:
    """``pipe:tok`` with ``asks`` (attribute lines) added to its call."""
    ws = TokenizeWorkspace(tmp_path / "ws", toy_tokenizer(tmp_path / "tokenizer"), workers=0)
    build = ws.root / "pipe" / "BUILD.marin"
    build.write_text(build.read_text().replace("    shard_bytes", asks + "    shard_bytes"))
    return ws


def _twelve_files(ws: TokenizeWorkspace, copies: int) -> list[str]:
    """12 files of ``copies`` x the stories each, named in the order the build takes them."""
    texts = stories()
    return [
        str(write_docs(ws.data / f"part-{i:02}.jsonl.gz", [f"{t} ({i}, {k})" for k in range(copies) for t in texts]))
        for i in range(12)
    ]


def _start(ws: TokenizeWorkspace, ray_cluster, events=None) -> subprocess.Popen:
    """The build of ``pipe:tok`` on the cluster, running."""
    return subprocess.Popen(
        ws.command("//pipe:tok", "--backend", "ray", "--ray_address", ray_cluster.address, events=events),
        cwd=ws.root,
        env={**ws.env(), **node_env()},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sharded_tokenize_on_two_ray_nodes_equals_a_single_process_build(ray_cluster, tmp_path):
    """Shards ask for a resource two nodes have one of each (and a CPU to spare, wherever the step's own task
    lands): the pool's two workers are on two nodes, whatever the scheduler does with the step."""
    nodes = []
    try:
        for _ in range(2):
            nodes.append(ray_cluster.add_node({"tokshard": 1}, num_cpus=2, timeout=300))
        ws = _workspace(tmp_path, '    shard_resources = {"cpu": 1, "tokshard": 1},\n')
        texts = stories()
        # shards of some seconds each: both workers are ready (levanter imported) before one has done them all
        files = [str(write_docs(ws.data / f"part-{i}.jsonl.gz", [f"{t} ({i})" for t in texts])) for i in range(8)]
        events = tmp_path / "events.jsonl"
        proc = subprocess.run(
            ws.command("//pipe:tok", "--backend", "ray", "--ray_address", ray_cluster.address, events=events),
            cwd=ws.root,
            env={**ws.env(), **node_env()},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        ray_cluster.remove_nodes(nodes)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = ws.output()

    rows = token_rows(out / "train")
    assert rows == reference_rows(files, ws.tokenizer, tmp_path / "reference")
    meta = json.loads((out / "tokenized.json").read_text())["splits"]["train"]
    assert (meta["documents"], meta["tokens"]) == (8 * len(texts), sum(len(r) for r in rows))

    progress = [
        e
        for e in (json.loads(line) for line in events.read_text().splitlines())
        if e["kind"] == "progress" and e["step"] == "pipe/tok"
    ]
    assert progress and progress[-1]["data"]["shards_done"] == 8 == progress[-1]["data"]["shards_total"]

    log = shard_log(out)
    assert sorted(line["state"] for line in log) == ["built"] * 8
    assert {line["node"] for line in log} == {node.node_id for node in nodes}  # spread over both nodes


def test_the_pool_grows_when_a_node_joins_mid_build(ray_cluster, tmp_path):
    """Shards ask for a resource one node has when the build starts: one worker. A second such node joins once
    the first shard is committed; the pool starts a worker there within a tick and it builds shards too. The step
    itself asks for a resource only the first node has (with a CPU to spare for the worker there)."""
    first = ray_cluster.add_node({"tokslot": 1, "tokstep": 1}, num_cpus=2, timeout=300)
    joined = []
    try:
        ws = _workspace(tmp_path, PINNED)
        _twelve_files(ws, copies=4)  # enough work left, once the node joins, for a worker there to warm up
        events = tmp_path / "events.jsonl"
        proc = _start(ws, ray_cluster, events)
        deadline = time.monotonic() + 600
        while not ws.committed_shards() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ws.committed_shards()) < 12, "the build finished before the node could join"
        join_time = time.time()
        joined.append(ray_cluster.add_node({"tokslot": 1}, num_cpus=1, timeout=300))
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
    finally:
        ray_cluster.remove_nodes([first, *joined])

    log = shard_log(ws.output())
    on_new = [line for line in log if line["node"] == joined[0].node_id]
    assert on_new and {line["node"] for line in log} == {first.node_id, joined[0].node_id}
    assert min(line["started"] for line in on_new) > join_time
    progress = [
        e["data"]
        for e in (json.loads(line) for line in events.read_text().splitlines())
        if e["kind"] == "progress" and e["step"] == "pipe/tok"
    ]
    workers = [d["workers"] for d in progress if d["workers"]]
    assert workers[0] == 1 and max(workers) == 2, workers


@pytest.mark.timeout(900)
def test_a_node_leaving_mid_build_loses_only_its_shards_in_flight(ray_cluster, tmp_path):
    """Two nodes build shards; one is killed (a preempted VM) once it has committed one: its shard in flight runs
    again on the other, the build finishes, and the cache holds exactly levanter's own rows. The step itself asks
    for a resource only the surviving node has."""
    stays = ray_cluster.add_node({"tokslot": 1, "tokstep": 1}, num_cpus=2, timeout=300)
    leaves = ray_cluster.add_node({"tokslot": 1}, num_cpus=1, timeout=300)
    try:
        ws = _workspace(tmp_path, PINNED)
        files = _twelve_files(ws, copies=2)
        proc = _start(ws, ray_cluster)

        def built_on_leaving() -> bool:
            logs = list((ws.root / "out" / "pipe").glob("tok-*/logs/shards.jsonl"))
            return any(line["node"] == leaves.node_id for log in logs for line in shard_log(log.parents[1]))

        deadline = time.monotonic() + 600
        while not built_on_leaving() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(ws.committed_shards()) < 12, "the build finished before the node could leave"
        ray_cluster.kill_node(leaves)
        left = time.time()
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
    finally:
        ray_cluster.remove_nodes([stays, leaves])

    out = ws.output()
    assert token_rows(out / "train") == reference_rows(files, ws.tokenizer, tmp_path / "reference")
    log = [line for line in shard_log(out) if line["state"] == "built"]
    assert sorted(line["index"] for line in log) == list(range(12))
    assert {line["node"] for line in log} == {stays.node_id, leaves.node_id}
    assert all(line["node"] == stays.node_id for line in log if line["started"] > left)
