"""Compute records and ``cache stats`` on a gs:// prefix (fake-gcs-server), through the real CLI."""

from __future__ import annotations

from test_compute import check_compute_and_stats, workspace  # tests/ (its conftest puts it on sys.path)

from marinbuild.store import fs


def test_compute_is_recorded_reported_and_summed_by_cache_stats_on_gcs(gs_prefix, tmp_path):
    check_compute_and_stats(workspace(tmp_path / "ws", gs_prefix), fs.read_bytes, fs.remove)
