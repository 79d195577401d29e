"""``marinbuild cache gc`` (through the real CLI) and ``cache status`` on a gs:// prefix (fake-gcs-server)."""

from __future__ import annotations

from test_cache import (  # tests/ (its conftest puts it on sys.path)
    Ws,
    check_gc_offers_old_outputs_under_experiments,
    states,
)

from marinbuild.cache.commands import cache_status
from marinbuild.store import gcs


def test_gc_offers_old_outputs_under_experiments_on_gcs(gs_prefix, tmp_path):
    filesystem = gcs.filesystem()

    def listdir(url: str) -> list[str]:
        filesystem.invalidate_cache()
        return [entry.rstrip("/").rsplit("/", 1)[1] for entry in filesystem.ls(url, detail=False)]

    check_gc_offers_old_outputs_under_experiments(tmp_path / "ws", gs_prefix, listdir)


def test_store_names_a_folders_entries_on_gcs(gs_prefix):
    """What ``why`` reads to tell a folder holding only ``.executor_info`` (not built yet) from a deleted output."""
    from marinbuild.store import fs
    from marinbuild.store.prefix_walk import Store

    folder = gs_prefix + "/pkg/step-abc123"
    fs.write_atomic(folder + "/.executor_info", b"{}")
    store = Store(gs_prefix)
    assert store.names(folder) == [".executor_info"]
    fs.write_atomic(folder + "/part/0.txt", b"x")
    gcs.filesystem().invalidate_cache()
    assert store.names(folder) == [".executor_info", "part"]
    assert store.names(gs_prefix + "/pkg/missing-000000") is None


def test_status_sends_two_requests_per_built_step(gs_prefix, tmp_path):
    """For each built step (4: a, b and the two of ``both``) one GET of its status and, each alone in its folder
    (``store.batch.GROUP_MIN``), one listing of its code record's md5 (for a "code changed" note); no lease, nothing
    read twice."""
    ws = Ws(tmp_path / "ws", gs_prefix)
    ws.build("//pkg:a", "//pkg:b", "//pkg:both")
    session = ws.session("//pkg:a", "//pkg:b", "//pkg:both")
    requests = gcs.filesystem().requests
    requests.reset()
    rows = cache_status(session, ["//pkg:a", "//pkg:b", "//pkg:both"])
    assert requests.reset() == 2 * 4
    assert states(rows) == {"//pkg:a": "built", "//pkg:b": "built", "//pkg:both": "built"}
