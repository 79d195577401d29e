"""``marinbuild.ml.consolidate``: one cache from many shard caches, exactly what levanter's
``consolidate_shard_caches`` writes (rows, ledger), an empty shard among them included. Real levanter caches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenize_ws import token_rows

pytest.importorskip("levanter")


def _ledger(path: Path) -> dict:
    data = json.loads((path / "shard_ledger.json").read_text())
    return {k: data[k] for k in ("total_num_rows", "shard_rows", "finished_shards", "field_counts", "is_finished")}


def test_consolidated_cache_equals_levanters_consolidation(tmp_path):
    import numpy as np
    from levanter.store.cache import CacheMetadata, consolidate_shard_caches, write_levanter_cache

    from marinbuild.ml.consolidate import consolidate_caches
    from marinbuild.ml.shard_work import write_empty_cache

    exemplar = {"input_ids": np.zeros((0,), dtype=np.int32)}
    rng = np.random.default_rng(7)
    paths = []
    for i in range(12):
        path = tmp_path / "shards" / f"cache-{i:02d}"
        if i == 5:
            write_empty_cache(str(path), exemplar, {"m": 1})
        else:
            rows = [
                {"input_ids": rng.integers(0, 1000, size=int(rng.integers(1, 3000))).astype(np.int32)}
                for _ in range(int(rng.integers(1, 40)))
            ]
            write_levanter_cache(iter(rows), str(path), metadata={"m": 1})
        paths.append(str(path))
    metadata = CacheMetadata(preprocessor_metadata={"m": 1})

    ours = consolidate_caches(paths, str(tmp_path / "ours"), exemplar, metadata)
    theirs = consolidate_shard_caches(paths, str(tmp_path / "theirs"), exemplar, metadata=metadata)

    assert ours.total_num_rows == theirs.total_num_rows > 0
    assert _ledger(tmp_path / "ours") == _ledger(tmp_path / "theirs")
    rows = token_rows(tmp_path / "ours")
    assert rows == token_rows(tmp_path / "theirs")
    assert rows == [r for p in paths for r in token_rows(p)]
