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
