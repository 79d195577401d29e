"""The merge: a split's shard caches copied, in order, into one levanter cache by all the pool's workers at once.

``merge(pool, output, caches, metadata)`` writes what levanter's ``consolidate_shard_caches`` writes (rows,
ledger: the tests compare both) for a text cache (``input_ids``). Each cache comes with its rows and tokens
(from its shard's result), so this process, which never imports levanter, knows where everything lands: the
output's token ids are the caches' concatenated, its offsets theirs shifted by the tokens before. Both arrays
are cut at the output's storage objects (levanter's zarr3 write chunks, 128Mi elements) into *units*, one job
each (``copy_unit``): a worker reads the pieces of the caches that one object holds, a read batch at a time,
and writes the object in one tensorstore transaction, so each object is written once, by one worker (no
conflicts, no rewriting a growing object per shard). Memory per worker: one object (512 MiB of token ids,
up to 1 GiB of offsets) plus a read batch.

Resuming: ``<output>.merge/`` holds ``plan.json`` (the caches and metadata) and a marker per finished unit; a
merge run again with the same plan copies only the units without one. Last, ``finish`` writes the ledger,
whole, once, then the row count (``offsets[0]``, which makes the rows visible); then ``<output>.merge/`` goes.
Only levanter's public API (``TreeStore``, ``CacheLedger``, ``LEDGER_FILE_NAME``, ``build_kvstore_spec``) and
its cache layout (``input_ids/data``, ``input_ids/offsets``) are used.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

import fsspec

Cache = tuple[str, int, int]  # a shard cache: path, rows, tokens
READ_BATCH = 16 * 1024 * 1024
"""Elements read from a shard cache at a time."""
ITEM_BYTES = {"data": 4, "offsets": 8}  # input_ids are int32, offsets int64


def merge(
    pool: Any, output: str, caches: list[Cache], metadata: dict[str, Any], on_unit: Callable[[int], None] | None = None
) -> dict[str, int]:
    """Copy ``caches`` (in order) into one cache at ``output`` over ``pool``; ``on_unit(bytes)`` after each unit.
    Returns rows, tokens, units and how many of them this call copied (the others a killed merge had)."""
    state = output.rstrip("/") + ".merge"
    plan = {"caches": [list(c) for c in caches], "metadata": metadata}
    fs, state_path = fsspec.core.url_to_fs(state)
    old = None
    with contextlib.suppress(FileNotFoundError, ValueError):  # no plan, or one a kill cut short: start afresh
        old = json.loads(fs.cat_file(f"{state_path}/plan.json"))
    resume = old == plan
    if not resume:
        for path in (state_path, fsspec.core.url_to_fs(output)[1]):
            if fs.exists(path):
                fs.rm(path, recursive=True)
    chunks = pool.call(open_output, {"output": output, "fresh": not resume})
    if not resume:
        fs.makedirs(state_path, exist_ok=True)
        fs.pipe_file(f"{state_path}/plan.json", json.dumps(plan).encode())
    units = plan_units(caches, chunks["data"], chunks["offsets"])
    done = {os.path.basename(p) for p in fs.ls(state_path, detail=False)}
    todo = [{**u, "output": output, "state": state} for u in units if u["id"] not in done]
    if on_unit is not None and len(todo) < len(units):  # what a killed merge copied counts as merged
        on_unit(sum((u["end"] - u["start"]) * ITEM_BYTES[u["kind"]] for u in units if u["id"] in done))
    pool.run(copy_unit, todo, lambda job, result: on_unit(result["bytes"]) if on_unit else None)
    pool.call(finish, {"output": output, "caches": plan["caches"], "metadata": metadata})
    for path in fs.find(state_path):  # not fs.rm: a local one needs a current directory, which Ray may remove
        fs.rm_file(path)
    with contextlib.suppress(OSError):
        fs.rmdir(state_path)
    rows, tokens = sum(c[1] for c in caches), sum(c[2] for c in caches)
    return {"rows": rows, "tokens": tokens, "units": len(units), "copied": len(todo)}


def merge_bytes(caches: list[Cache]) -> int:
    return sum(c[2] * ITEM_BYTES["data"] + c[1] * ITEM_BYTES["offsets"] for c in caches)


def plan_units(caches: list[Cache], data_chunk: int, offsets_chunk: int) -> list[dict[str, Any]]:
    """The units: token ids ``[start, end)`` and offsets indices ``[start, end)`` (index ``i`` is row ``i - 1``'s
    end; index 0, the row count, is ``finish``'s), each within one storage object, with the pieces of the caches
    they hold: ``[path, first, last, shift]`` (elements, or rows; ``shift`` added to offsets)."""
    token_starts, row_starts = [0], [0]
    for _, rows, tokens in caches:
        token_starts.append(token_starts[-1] + tokens)
        row_starts.append(row_starts[-1] + rows)
    units = []
    for n, start in enumerate(range(0, token_starts[-1], data_chunk)):
        end = min(start + data_chunk, token_starts[-1])
        sources = [[caches[i][0], lo, hi, 0] for i, lo, hi in _overlaps(token_starts, start, end)]
        units.append({"id": f"data-{n:06d}", "kind": "data", "start": start, "end": end, "sources": sources})
    for n, start in enumerate(range(0, row_starts[-1] + 1, offsets_chunk)):
        first, end = max(start, 1), min(start + offsets_chunk, row_starts[-1] + 1)
        if first < end:
            pieces = _overlaps(row_starts, first - 1, end - 1)
            sources = [[caches[i][0], lo, hi, token_starts[i]] for i, lo, hi in pieces]
            units.append({"id": f"offsets-{n:06d}", "kind": "offsets", "start": first, "end": end, "sources": sources})
    return units


def _overlaps(starts: list[int], start: int, end: int) -> list[tuple[int, int, int]]:
    """``(i, lo, hi)``: the part ``[lo, hi)`` of item ``i`` (which spans ``starts[i]:starts[i + 1]``) inside
    ``[start, end)``, for every item with one."""
    out = []
    i = bisect.bisect_right(starts, start) - 1
    while i < len(starts) - 1 and starts[i] < end:
        lo, hi = max(start, starts[i]) - starts[i], min(end, starts[i + 1]) - starts[i]
        if lo < hi:
            out.append((i, lo, hi))
        i += 1
    return out


def _store(path: str, mode: str) -> Any:
    """The ``input_ids`` ``JaggedArrayStore`` of the cache at ``path``."""
    import numpy as np
    from levanter.store.tree_store import TreeStore

    return TreeStore.open({"input_ids": np.zeros((0,), dtype=np.int32)}, path, mode=mode).tree["input_ids"]


def open_output(job: dict[str, Any]) -> dict[str, int]:
    """Create (``fresh``) or open the output's arrays; the elements of their storage objects."""
    store = _store(job["output"], "w" if job["fresh"] else "a")
    return {
        "data": int(store.data.chunk_layout.write_chunk.shape[0]),
        "offsets": int(store.offsets.chunk_layout.write_chunk.shape[0]),
    }


def copy_unit(job: dict[str, Any]) -> dict[str, Any]:
    """Write one unit (``plan_units``) in one transaction, then its marker; the bytes written. Of the sources only
    the array read is opened, all at once (``TreeStore.open`` opens both, one after the other)."""
    import tensorstore as ts
    from levanter.tensorstore_serialization import build_kvstore_spec

    kind = job["kind"]  # "data" or "offsets": the JaggedArrayStore's arrays, and their folders in a cache
    target = getattr(_store(job["output"], "a"), kind).with_transaction(txn := ts.Transaction())
    dtype = target.dtype.numpy_dtype  # a shard's token ids may be int64 (levanter's writer), the output's are int32
    kvstores = [build_kvstore_spec(f"{s[0].rstrip('/')}/input_ids/{kind}") for s in job["sources"]]
    opening = [ts.open({"driver": "zarr3", "kvstore": kv}, open=True, read=True) for kv in kvstores]
    at, skip = job["start"], int(kind == "offsets")  # a cache's offsets[0] is its row count
    for source, (_, lo, hi, shift) in zip(opening, job["sources"], strict=True):
        array = source.result()
        for start in range(lo + skip, hi + skip, READ_BATCH):
            part = array[start : min(start + READ_BATCH, hi + skip)].read().result()
            part += shift  # in place (token ids: 0): no copy of the batch
            target[at : at + len(part)].write(part.astype(dtype, copy=False)).result()
            at += len(part)
    txn.commit_async().result()
    if at != job["end"]:
        raise RuntimeError(f"merge unit {job['id']} of {job['output']}: wrote up to {at}, expected {job['end']}")
    with fsspec.open(f"{job['state']}/{job['id']}", "w") as f:
        f.write("")
    return {"id": job["id"], "bytes": (at - job["start"]) * dtype.itemsize}


def finish(job: dict[str, Any]) -> dict[str, int]:
    """The ledger levanter writes for these caches consolidated (shards named by their folders), then the row
    count: the merged cache is complete and readable."""
    from levanter.store.cache import CacheLedger, CacheMetadata

    out = CacheLedger(total_num_rows=0, shard_rows={}, finished_shards=[], metadata=CacheMetadata(job["metadata"]))
    for path, rows, tokens in job["caches"]:
        name = os.path.basename(path.rstrip("/"))
        out.shard_rows[name] = rows
        out.finished_shards.append(name)
        out.total_num_rows += rows
        out.field_counts["input_ids"] = out.field_counts.get("input_ids", 0) + tokens
    out.is_finished = True
    write_ledger(job["output"], out)
    _store(job["output"], "a").offsets[0].write(out.total_num_rows).result()
    return {"rows": out.total_num_rows}


def write_ledger(cache: str, value: Any) -> None:
    from levanter.store.cache import LEDGER_FILE_NAME

    with fsspec.open(f"{cache.rstrip('/')}/{LEDGER_FILE_NAME}", "w") as f:
        f.write(value.to_json())
