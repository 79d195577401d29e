"""``marinbuild.ml.consolidate``: the merge writes exactly what levanter's ``consolidate_shard_caches`` writes
(every token id, every offset, the ledger), over two worker processes, for caches large enough to fill more
than one of the output's storage objects (so units cut caches in the middle), an empty cache among them; a
merge killed after some units resumes with only the others. Real levanter caches, real worker processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("levanter")

REPO = Path(__file__).resolve().parents[2]
METADATA = {"m": 1}
MERGE = """
import json, sys
from marinbuild.ml.consolidate import merge
from marinbuild.ml.shard_pool import LocalPool
pool = LocalPool(int(sys.argv[3]), offline=True)
try:
    print(json.dumps(merge(pool, sys.argv[1], [tuple(c) for c in json.loads(sys.argv[2])], {"m": 1})))
finally:
    pool.close()
"""


@pytest.fixture(scope="module")
def caches(tmp_path_factory) -> tuple[list[list], Path]:
    """Shard caches of about 150M tokens in all (128Mi fill one storage object), one of them empty, and
    levanter's own consolidation of them."""
    import numpy as np
    from levanter.store.cache import CacheMetadata, consolidate_shard_caches, write_levanter_cache

    from marinbuild.ml.shard_work import write_empty_cache

    root = tmp_path_factory.mktemp("caches")
    rng = np.random.default_rng(7)
    listed = []
    for i in range(9):
        path = root / "shards" / f"cache-{i:02d}"
        if i == 4:
            write_empty_cache(str(path), {"input_ids": np.zeros((0,), dtype=np.int32)}, METADATA)
        else:
            rows = [rng.integers(0, 50_000, size=int(rng.integers(1, 400_000))).astype(np.int32) for _ in range(90)]
            write_levanter_cache(({"input_ids": r} for r in rows), str(path), metadata=METADATA)
        ledger = json.loads((path / "shard_ledger.json").read_text())
        listed.append([str(path), ledger["total_num_rows"], ledger["field_counts"].get("input_ids", 0)])
    exemplar = {"input_ids": np.zeros((0,), dtype=np.int32)}
    consolidate_shard_caches([c[0] for c in listed], str(root / "levanter"), exemplar, CacheMetadata(METADATA))
    return listed, root / "levanter"


def _merge(output: Path, caches: list[list], workers: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", MERGE, str(output), json.dumps(caches), str(workers)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _assert_same_cache(ours: Path, theirs: Path) -> None:
    import numpy as np
    from levanter.store.tree_store import TreeStore

    ledger = json.loads((ours / "shard_ledger.json").read_text())
    assert ledger == json.loads((theirs / "shard_ledger.json").read_text())
    exemplar = {"input_ids": np.zeros((0,), dtype=np.int32)}
    a, b = (TreeStore.open(exemplar, str(p), mode="r").tree["input_ids"] for p in (ours, theirs))
    rows, tokens = ledger["total_num_rows"], ledger["field_counts"]["input_ids"]
    assert a.num_rows == b.num_rows == rows and tokens > 2**27
    assert np.array_equal(a.offsets[: rows + 1].read().result(), b.offsets[: rows + 1].read().result())
    assert np.array_equal(a.data[:tokens].read().result(), b.data[:tokens].read().result())
    assert not Path(f"{ours}.merge").exists()


def test_the_merge_equals_levanters_consolidation(caches, tmp_path):
    listed, theirs = caches
    proc = _merge(tmp_path / "ours", listed, workers=2)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == 0
    done = json.loads(out.splitlines()[-1])
    assert done["units"] == done["copied"] == 3  # two objects of token ids, one of offsets
    _assert_same_cache(tmp_path / "ours", theirs)


def test_a_killed_merge_resumes_with_only_the_units_it_had_not_copied(caches, tmp_path):
    listed, theirs = caches
    state = tmp_path / "ours.merge"
    proc = _merge(tmp_path / "ours", listed, workers=1)
    try:
        while proc.poll() is None and len([p for p in state.glob("*-*")]) == 0:
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    finished = len(list(state.glob("*-*")))
    assert 0 < finished < 3, f"killed with {finished} of 3 units copied"
    assert not (tmp_path / "ours" / "shard_ledger.json").exists()  # the ledger is written once, at the end

    again = _merge(tmp_path / "ours", listed, workers=2)
    out, _ = again.communicate(timeout=900)
    assert again.returncode == 0
    done = json.loads(out.splitlines()[-1])
    assert (done["units"], done["copied"]) == (3, 3 - finished)
    _assert_same_cache(tmp_path / "ours", theirs)
