"""One levanter cache from shard caches, in this process: levanter's own copy steps, without zephyr.

``consolidate_caches(paths, output, exemplar, metadata)`` writes what levanter's ``consolidate_shard_caches``
writes (the tests compare both row by row and ledger by ledger) by running the same steps of
``levanter.store.cache``: each shard's ledger and data sizes give its offsets in the output; each shard's data
is copied in at its offset (``_copy_in_batches``), the output opened once; then every shard's offsets in one
tensorstore transaction, the merged ledger and the row count.

Why not ``consolidate_shard_caches`` itself: its copy of each shard reopens the output and ends with a full
``gc.collect()``, which in a process holding jax and a tokenizer costs far more than copying a small shard
(with thousands of shards, nearly all the time), and its zephyr pipelines add a per-shard cost. Here shards
are copied one at a time in one event loop: neighbouring shards write the same tensorstore chunk at its edge,
and one writer per array needs no reasoning about concurrent read-modify-writes. The private functions are
levanter's (pinned in pyproject.toml); tests/ml/test_consolidate.py fails if they stop matching.
"""

from __future__ import annotations

import asyncio
import copy
import operator
from typing import Any

COPY_ELEMENTS = 64 * 1024 * 1024
"""Elements read and written at a time (levanter's own batch for this copy)."""


def consolidate_caches(paths: list[str], output: str, exemplar: Any, metadata: Any) -> Any:
    """Copy the caches at ``paths``, in order, into one cache at ``output``; its ``CacheLedger``."""
    import jax
    from levanter.store import cache as lc
    from levanter.store.tree_store import TreeStore

    if not paths:
        return lc.consolidate_shard_caches([], output, exemplar, metadata=metadata)  # no zephyr on this path
    ledgers, sizes = [], []
    for path in paths:
        ledgers.append(lc.CacheLedger.load(path, metadata))
        with lc._no_cache_read_context():
            store = TreeStore.open(exemplar, path, mode="r", cache_metadata=True)
            sizes.append(jax.tree.map(lambda x: x.data_size, store.tree))
    infos = []
    rows = 0
    data_offsets = jax.tree.map(lambda x: 0, sizes[0])
    for path, ledger, size in zip(paths, ledgers, sizes, strict=True):
        infos.append(
            {"path": path, "row_offset": rows, "data_offset_tree": copy.deepcopy(data_offsets), "ledger": ledger}
        )
        rows += ledger.total_num_rows
        data_offsets = jax.tree.map(operator.add, data_offsets, size)

    TreeStore.open(exemplar, output, mode="w", cache_metadata=True)

    async def copy_all() -> None:
        with lc._no_cache_read_context():
            dest = TreeStore.open(exemplar, output, mode="a", cache_metadata=False)
            for info in infos:
                source = TreeStore.open(exemplar, info["path"], mode="r", cache_metadata=True)
                for dest_array, source_array, offset in zip(
                    jax.tree.leaves(dest.tree),
                    jax.tree.leaves(source.tree),
                    jax.tree.leaves(info["data_offset_tree"]),
                    strict=True,
                ):
                    await lc._copy_in_batches(
                        dest_array.data, offset, source_array.data, source_array.data_size, COPY_ELEMENTS
                    )

    asyncio.run(copy_all())
    asyncio.run(lc._consolidate_metadata(output, exemplar, infos))
    counts = [lc._field_counts_from_data_sizes(size) for size in sizes]
    ledger = lc._merge_materialized_ledgers(output, paths, ledgers, counts, metadata)
    lc._expose_cache_rows(output, exemplar, ledger.total_num_rows)
    return ledger
