"""``marinbuild cache gc`` on a gs:// prefix (fake-gcs-server), through the real CLI."""

from __future__ import annotations

from test_cache import check_gc_offers_old_outputs_under_experiments  # tests/ (its conftest puts it on sys.path)

from marinbuild.store import gcs


def test_gc_offers_old_outputs_under_experiments_on_gcs(gs_prefix, tmp_path):
    filesystem = gcs.filesystem()

    def listdir(url: str) -> list[str]:
        filesystem.invalidate_cache()
        return [entry.rstrip("/").rsplit("/", 1)[1] for entry in filesystem.ls(url, detail=False)]

    check_gc_offers_old_outputs_under_experiments(tmp_path / "ws", gs_prefix, listdir)
