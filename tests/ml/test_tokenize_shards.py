"""``tokenize`` shard by shard on the local backend: the same tokens as levanter's own builder, shards as cached
actions (a new file is one new shard; a killed build resumes at shard granularity; ``why`` counts them),
progress (events and ``logs/progress.jsonl``), and bad input named by file and line or skipped and counted.
Real CLI builds in child processes; each build's ``logs/shards.jsonl`` says which shards it built and which it
found cached.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from serve_ws import Server
from tokenize_ws import (
    TokenizeWorkspace,
    gz_bytes,
    pool_workers,
    reference_rows,
    shard_log,
    stories,
    token_rows,
    toy_tokenizer,
    write_docs,
)

pytest.importorskip("levanter")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return toy_tokenizer(tmp_path_factory.mktemp("toy-tokenizer"))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return stories()


def _runs(log: list[dict]) -> list[list[dict]]:
    runs: dict[str, list[dict]] = {}
    for line in log:
        runs.setdefault(line["run"], []).append(line)
    return list(runs.values())


def test_sharded_tokens_equal_levanters_and_a_new_file_is_one_new_shard(tmp_path, tokenizer, texts):
    ws = TokenizeWorkspace(tmp_path / "ws", tokenizer, workers=2)
    files = [write_docs(ws.data / f"part-{i}.jsonl.gz", texts[i * 100 : (i + 1) * 100]) for i in range(6)]
    files.insert(3, write_docs(ws.data / "part-2a.jsonl.gz", texts[200:300]))  # part-2's content again
    first = ws.build()
    assert first.code == 0, first.stderr[-4000:]
    out = ws.output()
    rows = token_rows(out / "train")
    assert rows == reference_rows([str(f) for f in files], tokenizer, tmp_path / "reference")
    meta = json.loads((out / "tokenized.json").read_text())
    assert meta["splits"]["train"]["documents"] == 700
    assert meta["splits"]["train"]["tokens"] == sum(len(r) for r in rows)
    assert meta["splits"]["train"]["shards"] == {"total": 7, "cached": 1, "built": 6}
    states = {Path(line["file"]).name: line["state"] for line in shard_log(out)}
    assert sorted(states.values()) == ["built"] * 6 + ["cached"]  # one file's content, one shard, built once
    assert {states["part-2.jsonl.gz"], states["part-2a.jsonl.gz"]} == {"built", "cached"}
    progress = [e for e in first.events if e["kind"] == "progress" and e["step"] == "pipe/tok"]
    assert progress and progress[-1]["data"]["shards_done"] == 7 and progress[-1]["data"]["shards_total"] == 7
    assert "tokens/s" in progress[-1]["detail"] and "merged" in progress[-1]["detail"]
    last = progress[-1]["data"]
    assert last["merge_bytes"] == last["merge_bytes_total"] > 0 and last["eta_s"] is not None
    logged = [json.loads(line) for line in (out / "logs" / "progress.jsonl").read_text().splitlines()]
    assert (logged[-1]["shards_done"], logged[-1]["merge_bytes"]) == (7, last["merge_bytes_total"])
    assert logged[-1]["detail"].startswith("7/7 shards")
    server = Server(ws.root)  # ``serve``'s page for the step shows the end of its progress log
    try:
        logs = {log["name"]: log["tail"] for log in server.json(f"/api/step/pipe/{out.name}")["logs"]}
    finally:
        server.stop()
    assert logged[-1]["detail"] in logs["logs/progress.jsonl"]

    write_docs(ws.data / "part-6.jsonl.gz", texts[600:700])
    second = ws.build()
    assert second.code == 0, second.stderr[-4000:]
    out2 = ws.output()
    assert out2 != out
    states = {Path(line["file"]).name: line["state"] for line in shard_log(out2)}
    assert states == {
        **{f"part-{i}.jsonl.gz": "cached" for i in range(6)},
        "part-2a.jsonl.gz": "cached",
        "part-6.jsonl.gz": "built",
    }
    assert token_rows(out2 / "train")[:700] == rows

    write_docs(ws.data / "part-7.jsonl.gz", texts[700:800])
    why = subprocess.run(ws.command("why", "//pipe:tok"), cwd=ws.root, env=ws.env(), capture_output=True, text=True)
    assert "shards: not known until its documents are built" in why.stdout, why.stdout
    docs = subprocess.run(ws.command("//pipe:docs"), cwd=ws.root, env=ws.env(), capture_output=True, text=True)
    assert docs.returncode == 0, docs.stderr
    why = subprocess.run(ws.command("why", "//pipe:tok"), cwd=ws.root, env=ws.env(), capture_output=True, text=True)
    assert why.returncode == 0, why.stderr
    assert "train shards: 9, 8 cached, 1 new" in why.stdout, why.stdout
    assert "new: " in why.stdout and "part-7.jsonl.gz" in why.stdout, why.stdout


def test_a_killed_tokenize_resumes_with_only_the_unfinished_shards(tmp_path, tokenizer, texts):
    ws = TokenizeWorkspace(tmp_path / "ws", tokenizer, workers=1)
    with (ws.root / "pyproject.toml").open("a") as f:
        f.write("heartbeat_interval = 1\nstale_after = 4\n")
    for i in range(8):  # each file distinct: equal files would be one shard
        write_docs(ws.data / f"part-{i}.jsonl.gz", [f"{t} ({i})" for t in texts[(i % 4) * 450 : (i % 4 + 1) * 450]])
    proc = subprocess.Popen(
        ws.command("//pipe:tok"),
        cwd=ws.root,
        env=ws.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        while not ws.committed_shards() and proc.poll() is None:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    done_before = ws.committed_shards()
    assert 0 < len(done_before) < 8, f"killed with {len(done_before)} of 8 shards committed"

    again = ws.build()
    assert again.code == 0, again.stderr[-4000:]
    last = _runs(shard_log(ws.output()))[-1]
    assert {line["key"] for line in last if line["state"] == "cached"} == done_before
    built = {line["key"] for line in last if line["state"] == "built"}
    assert len(built) == 8 - len(done_before) and not built & done_before


@pytest.mark.parametrize("idle", ["0", "warm"])
def test_a_worker_killed_mid_shard_reruns_only_its_shard(tmp_path, tokenizer, texts, idle, warm_env):
    """Two workers each mid-shard; one is SIGKILLed. The build finishes: the killed worker's shard is built
    again (its dir keeps the killed attempt's partial cache beside the new one), the other shard in flight
    is built once, by the worker that was building it. Workers that die with the step or outlive it alike."""
    ws = TokenizeWorkspace(tmp_path / "ws", tokenizer, workers=2)
    ws.extra_env.update(warm_env if idle == "warm" else {"MARINBUILD_WORKER_IDLE": "0"})
    for i in range(4):  # a few seconds of tokenizing each
        write_docs(ws.data / f"part-{i}.jsonl.gz", [f"{t} ({i}, {k})" for k in range(4) for t in texts])
    docs = subprocess.run(ws.command("//pipe:docs"), cwd=ws.root, env=ws.env(), capture_output=True, text=True)
    assert docs.returncode == 0, docs.stderr

    def in_flight() -> list[Path]:
        return [
            d for d in ws.shard_store.glob("*/*") if any(d.glob("cache-*")) and not any(d.glob(".marinbuild_action.*"))
        ]

    proc = subprocess.Popen(
        ws.command("//pipe:tok"), cwd=ws.root, env=ws.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    while len(in_flight()) < 2 and proc.poll() is None:
        time.sleep(0.05)
    workers = pool_workers("", parent=proc.pid)
    assert len(workers) == 2, workers
    os.kill(workers[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]

    attempts = sorted(len(list(d.glob("cache-*"))) for d in ws.shard_store.glob("*/*"))
    assert attempts == [1, 1, 1, 2]  # only the killed shard ran twice
    out = ws.output()
    meta = json.loads((out / "tokenized.json").read_text())["splits"]["train"]
    shard_tokens = sum(line["tokens"] for line in shard_log(out))
    assert (meta["documents"], meta["tokens"], meta["shards"]["built"]) == (4 * 4 * len(texts), shard_tokens, 4)


def _failed(ws: TokenizeWorkspace) -> str:
    result = ws.build()
    assert result.code != 0, result.stdout
    return result.stderr


def test_bad_input_is_named_by_file_and_line_or_skipped_and_counted(tmp_path, tokenizer, texts):
    ws = TokenizeWorkspace(tmp_path / "ws", tokenizer, workers=2, in_place=True)
    write_docs(ws.data / "good.jsonl.gz", texts[:50])
    lines = [json.dumps({"text": t}) for t in texts[50:60]]

    (ws.data / "badjson.jsonl.gz").write_bytes(gz_bytes(lines[:2] + ['{"text": "unterminated'] + lines[2:]))
    err = _failed(ws)
    assert "badjson.jsonl.gz:line 3: not JSON" in err, err[-3000:]

    (ws.data / "badjson.jsonl.gz").unlink()
    (ws.data / "nokey.jsonl.gz").write_bytes(gz_bytes(lines[:1] + [json.dumps({"body": "x"})] + lines[1:]))
    err = _failed(ws)
    assert "nokey.jsonl.gz:line 2: no field 'text'" in err, err[-3000:]

    (ws.data / "nokey.jsonl.gz").unlink()
    whole = gz_bytes(lines * 40)
    (ws.data / "truncated.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    err = _failed(ws)
    assert "truncated.jsonl.gz:line " in err and "cannot read the file past line" in err, err[-3000:]

    (ws.data / "badjson.jsonl.gz").write_bytes(gz_bytes(lines[:2] + ["not json", "{]"] + lines[2:]))
    (ws.data / "nokey.jsonl.gz").write_bytes(gz_bytes(lines[:1] + [json.dumps({"body": "x"})] + lines[1:]))
    ws.set_build(workers=2, skip_bad_records=True)
    result = ws.build()
    assert result.code == 0, result.stderr[-4000:]
    out = ws.output()
    meta = json.loads((out / "tokenized.json").read_text())["splits"]["train"]
    by_file = {Path(p).name: n for p, n in meta["skipped_by_file"].items()}
    assert by_file == {"badjson.jsonl.gz": 2, "nokey.jsonl.gz": 1, "truncated.jsonl.gz": 1}
    assert meta["skipped"] == 4
    skipped = {Path(line["file"]).name: line["skipped"] for line in shard_log(out)}
    assert skipped == {"good.jsonl.gz": 0, **by_file}
    assert meta["documents"] == len(token_rows(out / "train")) > 50 + 10 + 10
