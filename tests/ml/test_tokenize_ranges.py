"""``tokenize`` with ``shard_bytes``: a large plain JSON-lines file split into byte ranges and small files grouped
give exactly the token ids, in the same document order, of levanter's own single-process builder; adding a
small file rebuilds only the group it falls in. Real CLI builds in child processes (local backend).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenize_ws import TokenizeWorkspace, reference_rows, shard_log, stories, token_rows, toy_tokenizer, write_docs

pytest.importorskip("levanter")


def _files_in_order(ws: TokenizeWorkspace) -> list[str]:
    """The files of the newest ``pipe:docs`` output, in the order tokenize reads them."""
    manifest = max((ws.root / "out" / "pipe").glob("docs-*/manifest.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(manifest.read_text())["files"]


def _last_run(output: Path) -> list[dict]:
    log = shard_log(output)
    return [line for line in log if line["run"] == log[-1]["run"]]


def test_ranges_and_groups_give_the_single_process_tokens_and_a_new_file_rebuilds_one_group(tmp_path):
    texts = stories()
    ws = TokenizeWorkspace(tmp_path / "ws", toy_tokenizer(tmp_path / "tokenizer"), workers=2)
    big = ws.data / "a-big.jsonl"
    lines = [json.dumps({"text": t}) for t in texts[:600]]
    big.write_bytes(("\r\n".join(lines[:300]) + "\n" + "\n".join(lines[300:])).encode())  # no newline at the end
    for i in range(12):
        write_docs(ws.data / f"small-{i:02d}.jsonl.gz", texts[600 + i * 40 : 600 + (i + 1) * 40])
    ws.shard_bytes = big.stat().st_size // 4 + 1
    ws.set_build(workers=2)
    first = ws.build()
    assert first.code == 0, first.stderr[-4000:]
    out = ws.output()
    files = _files_in_order(ws)
    rows = token_rows(out / "train")
    assert rows == reference_rows(files, ws.tokenizer, tmp_path / "reference")
    meta = json.loads((out / "tokenized.json").read_text())["splits"]["train"]
    assert meta["documents"] == 600 + 12 * 40 and meta["files"] == 13
    run = _last_run(out)
    ranges = [line for line in run if "a-big.jsonl [bytes" in line["file"]]
    assert len(ranges) == 4 and all(line["files"] == 1 for line in ranges)
    assert sum(line["documents"] for line in ranges) == 600
    groups = [line for line in run if line["files"] > 1]
    assert groups and sum(line["files"] for line in groups) <= 12 and len(run) < 4 + 12  # small files grouped

    write_docs(ws.data / "small-05b.jsonl.gz", texts[1100:1140])
    second = ws.build()
    assert second.code == 0, second.stderr[-4000:]
    out2 = ws.output()
    files2 = _files_in_order(ws)
    assert len(files2) == 14
    assert token_rows(out2 / "train") == reference_rows(files2, ws.tokenizer, tmp_path / "reference-2")
    run2 = _last_run(out2)
    built = [line for line in run2 if line["state"] == "built"]
    assert 1 <= len(built) <= 2 and any(line["files"] > 1 or "small-05b" in line["file"] for line in built), built
    assert all("a-big.jsonl" not in line["file"] for line in built)  # the same file split the same way: reused
