"""``tokenize`` reading a ``download`` target: the document files the download copied (a README among them is
not a document) become the training split, the same documents as the source's."""

from __future__ import annotations

import json

import pytest
from download_ws import DownloadWorkspace, FileServer
from tokenize_ws import stories, toy_tokenizer, write_docs

pytest.importorskip("levanter")


def test_tokenize_takes_a_download_target(tmp_path):
    tokenizer = toy_tokenizer(tmp_path / "toy-tokenizer")
    texts = stories()[:300]
    for i in range(3):
        write_docs(tmp_path / "src" / "data" / f"part-{i}.jsonl.gz", texts[i * 100 : (i + 1) * 100])
    (tmp_path / "src" / "data" / "README.md").write_text("# three parts\n")
    server = FileServer(tmp_path / "src")
    try:
        ws = DownloadWorkspace(
            tmp_path / "ws",
            f"""
            load("@marinbuild//rules:download.py", "download")
            load("@marinbuild//rules:tokenize.py", "tokenize")

            download(name = "dl", url = "{server.url}/data/")
            tokenize(name = "tok", train = [":dl"], tokenizer_name = "{tokenizer}", workers = 1)
            """,
            env={"HF_HUB_OFFLINE": "1"},
        )
        result = ws.build("//pipe:tok")
        assert result.code == 0, result.stderr[-4000:]
    finally:
        server.close()
    manifest = json.loads((ws.output("dl") / "manifest.json").read_text())
    assert sorted(f["path"] for f in manifest["files"]) == ["README.md"] + [f"part-{i}.jsonl.gz" for i in range(3)]
    tokenized = json.loads((ws.output("tok") / "tokenized.json").read_text())
    assert tokenized["splits"]["train"]["documents"] == 300 and tokenized["splits"]["train"]["files"] == 3


def test_a_folder_read_in_place_tokenized_into_marins_path(tmp_path):
    """Tootsie's in-place datasets: ``raw_data(urls = ["<folder>/"])`` is every document file below the folder (a
    JSON-lines file named ``.json.gz``, as Dolma's are, included; a download's provenance.json not), and a
    ``tokenize`` with ``override_output_path`` writes its cache there while its shards stay under the prefix."""
    tokenizer = toy_tokenizer(tmp_path / "toy-tokenizer")
    texts = stories()[:90]
    folder = tmp_path / "marin" / "documents"
    write_docs(folder / "a" / "part-0.jsonl.gz", texts[:30])
    write_docs(folder / "b" / "part-1.json.gz", texts[30:60])  # JSON lines under a .json name
    (folder / "b" / "part-2.json").write_text(json.dumps([{"text": t} for t in texts[60:]]))  # a JSON array
    (folder / "provenance.json").write_text(json.dumps({"dataset": "x", "links": []}))
    ws = DownloadWorkspace(
        tmp_path / "ws",
        f"""
        load("@marinbuild//rules:data.py", "raw_data")
        load("@marinbuild//rules:tokenize.py", "tokenize")

        raw_data(name = "docs", urls = ["{folder}/"])
        tokenize(name = "tok", train = [":docs"], tokenizer_name = "{tokenizer}", workers = 1,
                 override_output_path = "tokenized/dolmino/math/mine-0a1b2c")
        """,
        env={"HF_HUB_OFFLINE": "1"},
    )
    result = ws.build("//pipe:tok")
    assert result.code == 0, result.stderr[-4000:]
    tokenized = json.loads((ws.root / "out" / "tokenized/dolmino/math/mine-0a1b2c/tokenized.json").read_text())
    assert tokenized["splits"]["train"]["documents"] == 90 and tokenized["splits"]["train"]["files"] == 3
    assert list((ws.root / "out" / "tokenize_shards").glob("*/*/shard.json"))
    assert list(ws.root.rglob("tokenize_shards")) == [ws.root / "out" / "tokenize_shards"]
