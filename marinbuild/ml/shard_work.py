"""The work of a tokenize worker (a pool process or a Ray actor): build one shard's cache.

``build_shard(job)`` reads the shard's pieces in order (``marinbuild.ml.records``), tokenizes them with
levanter's own preprocessor for ``TextLmDatasetFormat`` (what ``build_lm_dataset_cache`` runs: BOS and EOS
added), writes the rows with ``write_levanter_cache`` and commits the shard; a shard another build committed
meanwhile is read, not built. ``describe(job)`` says what the merged cache's ledger and ``tokenized.json``
need; it is also each worker's warm-up (levanter imported, the tokenizer loaded before its first shard). Jobs
and results are plain dicts. levanter, jax and tokenizers are imported here, in the worker, never in the build process.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from marinbuild.ml import shards as sh
from marinbuild.ml.consolidate import write_ledger
from marinbuild.ml.records import ReadCounts, read_texts
from marinbuild.ml.run_log import node_name
from marinbuild.ml.tokenizer import resolve_tokenizer

_PROCESSORS: dict[tuple[Any, ...], Any] = {}
"""Tokenizing processors by tokenizer (its files' identity and path) and text key, kept for the worker's life
(a warm worker's, over steps): loading a tokenizer is slow."""


def set_worker_env(offline: bool) -> None:
    """One core per worker: HF tokenizers' own thread pool off; a local tokenizer never waits on the Hub; a small
    tensorstore read cache (the merge reads each shard once)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("LEVANTER_TS_CACHE_LIMIT", str(64 << 20))
    if offline:
        os.environ.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})


def _processor(job: dict[str, Any]) -> Any:
    key = (job.get("tokenizer_id"), tokenizer := resolve_tokenizer(job["tokenizer"]), text_key := job["text_key"])
    if key not in _PROCESSORS:
        from levanter.data.text import TextLmDatasetFormat
        from levanter.data.text.formats import preprocessor_for_format
        from levanter.tokenizers import load_tokenizer

        fmt = TextLmDatasetFormat(text_key=text_key)
        _PROCESSORS[key] = preprocessor_for_format(fmt, load_tokenizer(tokenizer), enforce_bos=True, enforce_eos=True)
    return _PROCESSORS[key]


def describe(job: dict[str, Any]) -> dict[str, Any]:
    """The processor's metadata (the merged cache's ledger has it) and the vocabulary size levanter counts. The
    pool's warm-up: it imports levanter (its cache writer included) and loads the tokenizer."""
    processor = _processor(job)
    return {"metadata": processor.metadata, "vocab_size": len(processor.tokenizer)}


def build_shard(job: dict[str, Any]) -> dict[str, Any]:
    """Build and commit one shard; return its ``ShardResult`` as a dict (``state``: built or cached)."""
    shard = sh.Shard.from_json(job["shard"])
    if sh.is_done(shard):
        return {**sh.read_result(shard).to_json(), "state": "cached"}
    set_worker_env(job.get("offline", False))
    from levanter.store.cache import CacheLedger, write_levanter_cache

    start = time.time()
    processor = _processor(job)
    cpu_start = time.process_time()  # after the worker's one-time imports and tokenizer load
    sh.clear_leftovers(shard)
    counts = [ReadCounts() for _ in shard.pieces]
    batch_size = int(job.get("batch_size", 128))
    text_key = job["text_key"]
    skip_bad = job.get("skip_bad_records", False)

    def rows() -> Any:
        batch: list[dict[str, str]] = []
        for piece, piece_counts in zip(shard.pieces, counts, strict=True):
            for text in read_texts(piece.path, text_key, piece_counts, skip_bad=skip_bad, span=piece.span):
                batch.append({text_key: text})
                if len(batch) >= batch_size:
                    yield from processor(batch)
                    batch = []
        if batch:
            yield from processor(batch)

    cache_name = f"cache-{uuid.uuid4().hex[:12]}"
    cache_path = f"{shard.dir}/{cache_name}"
    written = write_levanter_cache(rows(), cache_path, metadata=processor.metadata)
    if written["count"] == 0:
        write_empty_cache(cache_path, processor.output_exemplar, processor.metadata)
    tokens = int(CacheLedger.load(cache_path).field_counts.get("input_ids", 0))
    skipped_by_file: dict[str, int] = {}
    for piece, piece_counts in zip(shard.pieces, counts, strict=True):
        if piece_counts.skipped:
            skipped_by_file[piece.path] = skipped_by_file.get(piece.path, 0) + piece_counts.skipped
    examples = [e for c in counts for e in c.examples][:5]
    truncated = [c.truncated for c in counts if c.truncated]
    result = sh.ShardResult(
        key=shard.key,
        path=shard.path,
        cache=cache_name,
        documents=written["count"],
        tokens=tokens,
        skipped=sum(c.skipped for c in counts),
        skipped_examples=examples or None,
        skipped_by_file=skipped_by_file or None,
        truncated="; ".join(truncated) or None,
        started=round(start, 3),
        seconds=round(time.time() - start, 3),
        cpu_seconds=round(time.process_time() - cpu_start, 3),
        node=node_name(),
    )
    sh.commit(shard, result)
    return {**result.to_json(), "state": "built"}


def write_empty_cache(cache_path: str, exemplar: Any, metadata: dict[str, Any]) -> None:
    """A finished, empty levanter cache at ``cache_path`` with ``exemplar``'s fields and the processor's
    ``metadata``, as levanter's own builder makes for no records (``write_levanter_cache`` of no rows writes
    nothing): a shard with no records still gets a cache that consolidation reads."""
    from levanter.store.cache import CacheLedger, CacheMetadata
    from levanter.store.tree_store import TreeStore

    TreeStore.open(exemplar, cache_path, mode="w", cache_metadata=True)
    empty = CacheLedger(total_num_rows=0, shard_rows={}, is_finished=True, metadata=CacheMetadata(metadata))
    write_ledger(cache_path, empty)
