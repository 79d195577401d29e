"""``tokenize`` on the Ray backend: its shards run as Ray tasks on both nodes of the session's real local cluster,
and the consolidated cache holds exactly the token ids levanter's own single-process builder writes for the
same files; its progress reports reach the driver's events. The build is the real CLI in a child process, a
driver of that cluster.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from raycluster import node_env
from tokenize_ws import TokenizeWorkspace, reference_rows, shard_log, stories, token_rows, toy_tokenizer, write_docs

pytest.importorskip("levanter")
pytestmark = pytest.mark.ml  # levanter tokenizes (tests/ray marks it ray)


def test_sharded_tokenize_on_two_ray_nodes_equals_a_single_process_build(ray_cluster, tmp_path):
    ws = TokenizeWorkspace(tmp_path / "ws", toy_tokenizer(tmp_path / "tokenizer"), workers=0)
    texts = stories()
    files = [str(write_docs(ws.data / f"part-{i}.jsonl.gz", texts[i * 150 : (i + 1) * 150])) for i in range(8)]
    events = tmp_path / "events.jsonl"
    proc = subprocess.run(
        ws.command("//pipe:tok", "--backend", "ray", "--ray_address", ray_cluster.address, events=events),
        cwd=ws.root,
        env={**ws.env(), **node_env()},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = ws.output()

    rows = token_rows(out / "train")
    assert rows == reference_rows(files, ws.tokenizer, tmp_path / "reference")
    meta = json.loads((out / "tokenized.json").read_text())["splits"]["train"]
    assert (meta["documents"], meta["tokens"]) == (1200, sum(len(r) for r in rows))

    progress = [
        e
        for e in (json.loads(line) for line in events.read_text().splitlines())
        if e["kind"] == "progress" and e["step"] == "pipe/tok"
    ]
    assert progress and progress[-1]["data"]["shards_done"] == 8 == progress[-1]["data"]["shards_total"]

    log = shard_log(out)
    assert sorted(line["state"] for line in log) == ["built"] * 8
    nodes = {line["node"] for line in log}
    assert len(nodes) >= 2 and nodes <= {node.node_id for node in ray_cluster.nodes}, nodes  # spread over nodes
