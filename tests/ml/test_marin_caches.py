"""A tokenized cache Marin's own ``tokenize`` step made (levanter's ledger per split, Marin's ``.executor_info``, no
``tokenized.json``) reads as a tokenize output: ``train_lm`` and ``evaluate`` can name it on Marin's bucket."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marinbuild.ml.tokenize import LEDGER, read_metadata

cache = pytest.importorskip("levanter.store.cache")

LLAMA3 = {"tokenizer": "meta-llama/Meta-Llama-3.1-8B", "vocab_size": 128000, "append_bos": True, "append_eos": True}


def marin_cache(out: Path, splits: dict[str, int], finished: bool = True) -> Path:
    """A Marin tokenize output: each split's ledger as levanter writes it, and the step's info as Marin does."""
    for split, rows in splits.items():
        ledger = cache.CacheLedger(
            total_num_rows=rows,
            shard_rows={"part-0": rows},
            is_finished=finished,
            finished_shards=["part-0"] if finished else [],
            field_counts={"input_ids": rows * 100},
            metadata=cache.CacheMetadata(preprocessor_metadata=LLAMA3),
        )
        (out / split).mkdir(parents=True)
        (out / split / LEDGER).write_text(ledger.to_json())
    info = {"name": "tokenized/dclm", "config": {"cache_path": str(out), "format": {"text_key": "contents"}}}
    (out / ".executor_info").write_text(json.dumps(info))
    return out


def test_levanters_ledger_name_is_the_one_read() -> None:
    assert cache.LEDGER_FILE_NAME == LEDGER


def test_a_marin_cache_reads_as_a_tokenize_output(tmp_path: Path) -> None:
    out = marin_cache(tmp_path / "tokenized/dclm_baseline-0206f1", {"train": 7, "validation": 3})
    meta = read_metadata(str(out))
    assert meta["tokenizer"] == "meta-llama/Meta-Llama-3.1-8B" and meta["vocab_size"] == 128000
    assert meta["text_key"] == "contents" and meta["name"] == "dclm_baseline" and meta["made_by"] == "marin"
    assert meta["splits"] == {"train": {"documents": 7, "tokens": 700}, "validation": {"documents": 3, "tokens": 300}}


def test_an_unfinished_or_missing_cache_says_what_it_expected(tmp_path: Path) -> None:
    out = marin_cache(tmp_path / "tokenized/half-123456", {"train": 7}, finished=False)
    with pytest.raises(FileNotFoundError, match="has no tokenized.json nor a finished levanter cache"):
        read_metadata(str(out))
