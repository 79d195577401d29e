"""Tokenize documents into one levanter token cache per split, shard by shard (the ``tokenize`` rule's work).

Output layout, exactly what levanter's ``LmDataConfig`` reads for a component whose ``cache_dir`` is the
output folder::

    <out>/train/          one levanter cache (input_ids), consolidated from the shards' caches
    <out>/validation/     the same for the validation documents (absent when there are none)
    <out>/tokenized.json  {"tokenizer", "vocab_size", "text_key", "splits": {split: {documents, tokens,
                           files, shards: {total, cached, built}, skipped}}}
    <out>/logs/shards.jsonl  one line per shard per attempt: run, split, index, file (the shard's file,
                           range or first file), files, key, state (cached or built), documents,
                           tokens, skipped, started, seconds, cpu_seconds, node
    <out>/logs/progress.jsonl  the step's progress (below), a line when it changed, at most every LOG_EVERY s
    <out>/logs/tokenize-workers.log  what local worker processes printed (levanter's own logs)

The inputs are cut into shards (``shard_plan``), each a content-addressed action (``shards``). Shards in the
store are reused; the others are built in parallel by long-lived workers (``shard_pool``: Ray actors when the
step runs on Ray, local processes otherwise; they load the tokenizer while the inputs are hashed) running
``shard_work``, then the same workers copy them in input order into the split's cache (``consolidate``).
Progress (shards, tokens per second, merged bytes, ETA) goes to the step's ``progress`` events and
``logs/progress.jsonl`` (``serve``'s step page shows the end of it). The token ids
are those levanter's own single-process builder (``build_lm_dataset_cache``) writes for the same files.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import fsspec

from marinbuild.ml import shard_work
from marinbuild.ml import shards as sh
from marinbuild.ml.consolidate import merge, merge_bytes
from marinbuild.ml.corpus import document_paths
from marinbuild.ml.process import is_local
from marinbuild.ml.run_log import RunLog
from marinbuild.ml.shard_pool import Pool, open_pool
from marinbuild.ml.tokenizer import is_local_tokenizer, resolve_tokenizer
from marinbuild.run.step_progress import report

METADATA = "tokenized.json"
SHARD_LOG = "shards.jsonl"
PROGRESS_LOG = "progress.jsonl"
SPLITS = ("train", "validation")

logger = logging.getLogger("marinbuild.ml.tokenize")


def read_metadata(tokenized_output: str) -> dict[str, Any]:
    """``tokenized.json`` of a tokenize output; for a cache Marin's ``tokenize`` step made (no such file), the same
    facts from levanter's ledger of each split and the step's ``.executor_info``."""
    try:
        with fsspec.open(os.path.join(tokenized_output, METADATA), "r") as f:
            return json.load(f)
    except FileNotFoundError:
        marin = _marin_metadata(tokenized_output)
        if marin is None:
            raise FileNotFoundError(
                f"{tokenized_output} has no {METADATA} nor a finished levanter cache (train/{LEDGER}): "
                "is it the output of a tokenize target, or of Marin's tokenize step?"
            ) from None
        return marin


LEDGER = "shard_ledger.json"
"""levanter's ``LEDGER_FILE_NAME`` (``tests/ml/test_marin_caches.py`` holds the two equal)."""


def _marin_metadata(out: str) -> dict[str, Any] | None:
    splits: dict[str, Any] = {}
    tokenizer: dict[str, Any] = {}
    for split in SPLITS:
        try:
            with fsspec.open(os.path.join(out, split, LEDGER), "r") as f:
                ledger = json.load(f)
        except FileNotFoundError:
            continue
        if ledger.get("is_finished"):
            tokens = (ledger.get("field_counts") or {}).get("input_ids")
            splits[split] = {"documents": ledger.get("total_num_rows"), "tokens": tokens}
            tokenizer = (ledger.get("metadata") or {}).get("preprocessor_metadata") or tokenizer
    if not splits or "tokenizer" not in tokenizer:
        return None
    try:
        with fsspec.open(os.path.join(out, ".executor_info"), "r") as f:
            config = json.load(f).get("config") or {}
    except (FileNotFoundError, ValueError):
        config = {}
    text_key = (config.get("format") or {}).get("text_key") or config.get("text_key") or "text"
    name = os.path.basename(out.rstrip("/")).rsplit("-", 1)[0]
    return {
        "kind": "tokenized",
        "name": name,
        "tokenizer": tokenizer["tokenizer"],
        "vocab_size": tokenizer.get("vocab_size"),
        "text_key": text_key,
        "splits": splits,
        "made_by": "marin",
    }


def shard_options(skip_bad_records: bool) -> dict[str, Any]:
    """Everything besides the input, text_key and tokenizer that changes a shard's tokens."""
    return {
        "preprocessor": "levanter BatchTokenizer",
        "enforce_bos": True,
        "enforce_eos": True,
        "skip_bad_records": skip_bad_records,
    }


def payload_of(attr: Any, output_path: str, name: str, package: str) -> dict[str, Any]:
    """The job of a ``tokenize`` target from its resolved attributes (the rule and ``why`` both use it)."""
    if bool(attr.tokenizer) == bool(attr.tokenizer_name):
        raise ValueError(f"tokenize {package}:{name}: give exactly one of tokenizer (a target) and tokenizer_name")
    return {
        "output_path": output_path,
        "name": name,
        "train": document_paths(attr.train),
        "validation": document_paths(attr.validation),
        "tokenizer": attr.tokenizer or attr.tokenizer_name,
        "text_key": attr.text_key,
        "batch_size": attr.batch_size,
        "skip_bad_records": attr.skip_bad_records,
        "shard_bytes": attr.shard_bytes,
        "workers": attr.workers,
        "shard_resources": dict(attr.shard_resources) if attr.shard_resources else None,
        "shard_store": attr.shard_store
        or sh.default_store(output_path, attr.override_output_path or "/".join(p for p in (package, name) if p)),
    }


def shard_status(payload: dict[str, Any]) -> list[str]:
    """For ``why``: per split, how many shards are cached and which are new, and why they are."""
    lines = []
    for split, shards in plan_splits(payload).items():
        new = [s for s in shards if not sh.is_done(s)]
        lines.append(f"{split} shards: {len(shards)}, {len(shards) - len(new)} cached, {len(new)} new")
        for shard in new[:10]:
            what = "these files' contents" if len(shard.pieces) > 1 else "this file's content"
            lines.append(
                f"  new: {shard.path} (no shard of {what} with this tokenizer, "
                f"text_key and options: key {shard.key[:16]})"
            )
        if len(new) > 10:
            lines.append(f"  ... and {len(new) - 10} more new shards")
    return lines


def tokenizer_id(spec: str) -> str:
    return sh.tokenizer_identity(spec, resolve_tokenizer(spec) if is_local_tokenizer(spec) else None)


def plan_splits(payload: dict[str, Any], tokenizer: str | None = None) -> dict[str, list[sh.Shard]]:
    """The shards of each split with files (each local input file is hashed here); ``tokenizer``: its identity."""
    tokenizer = tokenizer or tokenizer_id(payload["tokenizer"])
    options = shard_options(bool(payload.get("skip_bad_records", False)))
    shard_bytes = int(payload.get("shard_bytes", 0))
    return {
        split: sh.plan(payload[split], payload["shard_store"], payload["text_key"], tokenizer, options, shard_bytes)
        for split in SPLITS
        if payload.get(split)
    }


LOG_EVERY = 10.0  # seconds between two progress lines in logs/progress.jsonl and the step's log


@dataclass
class _Progress:
    """Shards done / total, the token rate of the shards built by this attempt, the merge's bytes, an ETA (from
    the input bytes left to tokenize, then the bytes left to merge, at the rate so far). Reported each second
    to a live display; written to ``log`` (and, where no display listens, the step's log) only when it changed,
    at most every ``LOG_EVERY`` seconds (the first and last line always, if they say something new)."""

    total: int
    done: int = 0
    built_tokens: int = 0
    todo_bytes: int = 0  # input bytes of the shards this attempt builds
    built_bytes: int = 0
    merge_total: int = 0
    merged: int = 0
    workers: int = 0
    start: float = field(default_factory=time.time)
    merge_start: float = 0.0
    last: float = 0.0
    logged: tuple[int, int, int] | None = None
    logged_at: float = 0.0
    log: RunLog | None = None  # logs/progress.jsonl

    def text(self) -> str:
        parts = [f"{self.done}/{self.total} shards", f"{self.rate():,.0f} tokens/s"]
        if self.merge_total:
            parts.append(f"merged {self.merged / 1e6:,.0f}/{self.merge_total / 1e6:,.0f} MB")
        eta = self.eta()
        if eta is not None:
            parts.append(f"ETA {int(eta) // 60}m{int(eta) % 60:02d}s" if eta >= 60 else f"ETA {eta:.0f}s")
        return ", ".join(parts)

    def rate(self) -> float:
        return self.built_tokens / max(time.time() - self.start, 1e-9)

    def eta(self) -> float | None:
        left, done, since = self.todo_bytes - self.built_bytes, self.built_bytes, self.start
        if self.merge_total:
            left, done, since = self.merge_total - self.merged, self.merged, self.merge_start
        return left * (time.time() - since) / done if done else None

    def report(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last < 1.0:
            return
        self.last = now
        eta = self.eta()
        data = {
            "shards_done": self.done,
            "shards_total": self.total,
            "tokens": self.built_tokens,
            "tokens_per_s": round(self.rate(), 1),
            "workers": self.workers,
            "merge_bytes": self.merged,
            "merge_bytes_total": self.merge_total,
            "eta_s": None if eta is None else round(eta, 1),
        }
        listened = report(self.text(), **data)
        state = (self.done, self.built_tokens, self.merged)
        if state == self.logged or (not force and now - self.logged_at < LOG_EVERY):
            return
        self.logged, self.logged_at = state, now
        if self.log is not None:
            self.log.add({"time": round(now, 1), "detail": self.text(), **data})
            self.log.flush()
        if not listened:
            logger.info("tokenize: %s", self.text())


def tokenize(payload: dict[str, Any]) -> dict[str, Any]:
    """Build (or reuse) every shard of ``payload``'s splits, merge each split; return ``tokenized.json``."""
    out = payload["output_path"]
    if not any(payload.get(split) for split in SPLITS):
        raise ValueError("nothing to tokenize: no train or validation files")
    common = {
        "tokenizer": payload["tokenizer"],
        "tokenizer_id": tokenizer_id(payload["tokenizer"]),  # a warm worker's tokenizer: the same files
        "text_key": payload["text_key"],
        "batch_size": payload.get("batch_size", 128),
        "skip_bad_records": payload.get("skip_bad_records", False),
        "offline": is_local_tokenizer(payload["tokenizer"]),
    }
    worker_log = None
    if is_local(out):
        os.makedirs(os.path.join(out, "logs"), exist_ok=True)
        worker_log = os.path.join(out, "logs", "tokenize-workers.log")
    pool = open_pool(
        int(payload.get("workers") or 0),
        payload.get("shard_resources"),
        common["offline"],
        worker_log,
        warm=(shard_work.describe, common),  # levanter imported, the tokenizer loaded while the inputs are hashed
        expect=sum(len(payload.get(split) or []) for split in SPLITS),
    )
    try:
        return _tokenize(payload, pool, common)
    finally:
        pool.close()


def _tokenize(payload: dict[str, Any], pool: Pool, common: dict[str, Any]) -> dict[str, Any]:
    out = payload["output_path"]
    plans = plan_splits(payload, common["tokenizer_id"])
    log = RunLog(os.path.join(out, "logs", SHARD_LOG))
    results: dict[str, dict[str, Any]] = {}  # by shard key: a file given twice, or in two splits, is built once
    todo: dict[str, dict[str, Any]] = {}
    waiting: dict[str, list[tuple[str, sh.Shard]]] = {}
    counts: dict[str, dict[str, int]] = {}
    unique = list({s.key: s for shards in plans.values() for s in shards}.values())
    with ThreadPoolExecutor(sh.LOOKUPS) as lookups:
        found = lookups.map(lambda s: sh.read_result(s).to_json() if sh.is_done(s) else None, unique)
        results.update((s.key, r) for s, r in zip(unique, found, strict=True) if r is not None)
    for split, shards in plans.items():
        counts[split] = {"total": len(shards), "cached": 0, "built": 0}
        for shard in shards:
            if shard.key in results:
                counts[split]["cached"] += 1
                log.add(_log_line(split, shard, results[shard.key], "cached"))
            else:
                todo.setdefault(shard.key, {**common, "shard": shard.to_json()})
                waiting.setdefault(shard.key, []).append((split, shard))
        n, cached = len(shards), counts[split]["cached"]
        logger.info("tokenize %s: %d shards, %d cached, %d to tokenize", split, n, cached, n - cached)
    progress = _Progress(
        total=sum(len(s) for s in plans.values()),
        done=sum(c["cached"] for c in counts.values()),
        log=RunLog(os.path.join(out, "logs", PROGRESS_LOG)),
    )
    progress.todo_bytes = sum(_size(job) for job in todo.values())

    def tick() -> None:
        progress.workers = pool.workers
        progress.report()

    def on_result(job: dict[str, Any], result: dict[str, Any]) -> None:
        key = job["shard"]["key"]
        results[key] = result
        state = result.get("state", "built")
        progress.built_bytes += _size(job)
        if state == "built":
            progress.built_tokens += result["tokens"]
        for n, (split, shard) in enumerate(waiting.pop(key)):
            this = state if n == 0 else "cached"  # the same file again: built once
            counts[split][this] += 1
            progress.done += 1
            log.add(_log_line(split, shard, result, this))
        tick()

    progress.report(force=True)
    try:
        pool.run(shard_work.build_shard, list(todo.values()), on_result, on_tick=tick)
    finally:
        log.flush()
    described = pool.call(shard_work.describe, common)
    caches = {split: [_cache(s, results[s.key]) for s in shards] for split, shards in plans.items()}
    progress.merge_total = sum(merge_bytes(c) for c in caches.values())
    progress.merge_start = time.time()

    def merged(n: int) -> None:
        progress.merged += n
        tick()

    splits: dict[str, Any] = {}
    for split, shards in plans.items():
        done = merge(pool, os.path.join(out, split), caches[split], described["metadata"], on_unit=merged)
        mine = [results[s.key] for s in shards]
        skipped = sum(r.get("skipped", 0) for r in mine)
        splits[split] = {
            "documents": done["rows"],
            "tokens": done["tokens"],
            "files": len(payload[split]),
            "shards": counts[split],
            "skipped": skipped,
            "skipped_by_file": _skipped_by_file(mine),
        }
        line = "tokenize %s: %d documents, %d tokens, %d bad records skipped; merged in %d units, %d copied now"
        logger.info(line, split, done["rows"], done["tokens"], skipped, done["units"], done["copied"])
    progress.report(force=True)
    metadata = {
        "kind": "tokenized",
        "name": payload.get("name"),
        "tokenizer": payload["tokenizer"],
        "vocab_size": described["vocab_size"],
        "text_key": payload["text_key"],
        "skip_bad_records": bool(payload.get("skip_bad_records", False)),
        "splits": splits,
    }
    with fsspec.open(os.path.join(out, METADATA), "w") as f:
        json.dump(metadata, f, indent=2)
    return metadata


def _cache(shard: sh.Shard, result: dict[str, Any]) -> tuple[str, int, int]:
    return f"{shard.dir}/{result['cache']}", result["documents"], result["tokens"]


def _size(job: dict[str, Any]) -> int:
    return sum(int(p["size"]) for p in job["shard"]["pieces"])


def _skipped_by_file(results: list[dict[str, Any]]) -> dict[str, int]:
    by_file: dict[str, int] = {}
    for r in results:
        # a shard built before ranges and groups has no skipped_by_file: it was one file, ``path``
        for path, n in (r.get("skipped_by_file") or ({r["path"]: r["skipped"]} if r.get("skipped") else {})).items():
            by_file[path] = by_file.get(path, 0) + n
    return by_file


def _log_line(split: str, shard: sh.Shard, result: dict[str, Any], state: str) -> dict[str, Any]:
    line = {"split": split, "index": shard.index, "file": shard.path, "files": len(shard.pieces), "key": shard.key}
    kept = ("documents", "tokens", "skipped", "started", "seconds", "cpu_seconds", "node")  # a shard.json has them all
    return {**line, "state": state, **{k: result.get(k) for k in kept}}
