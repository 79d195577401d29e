"""Compute records and ``cache stats`` on a gs:// prefix (fake-gcs-server), through the real CLI."""

from __future__ import annotations

from test_compute import check_compute_and_stats, workspace  # tests/ (its conftest puts it on sys.path)

from marinbuild.run.compute import PREFIX, SUFFIX, hours_at
from marinbuild.store import fs, gcs


def test_compute_is_recorded_reported_and_summed_by_cache_stats_on_gcs(gs_prefix, tmp_path):
    filesystem = gcs.filesystem()

    def listdir(url: str) -> list[str]:
        filesystem.invalidate_cache()
        return [entry.rstrip("/").rsplit("/", 1)[1] for entry in filesystem.ls(url, detail=False)]

    check_compute_and_stats(workspace(tmp_path / "ws", gs_prefix), listdir)


def test_the_hours_of_many_outputs_are_read_from_one_listing(gs_prefix):
    paths = [f"{gs_prefix}/many/s{i}-00000{i}" for i in range(6)]
    for i, path in enumerate(paths[:5]):
        fs.write_atomic(f"{path}/{PREFIX}CPU={i},TPU-v4={10 * i}{SUFFIX}", b"{}")
        fs.write_atomic(f"{path}/out.txt", b"x")
    requests = gcs.filesystem().requests
    requests.reset()
    hours = hours_at(paths)
    assert requests.reset() == 1  # one listing of the folder's range, not a request per output
    assert hours == [{"CPU-hours": i, "TPU v4 chip-hours": 10 * i} for i in range(5)] + [None]
