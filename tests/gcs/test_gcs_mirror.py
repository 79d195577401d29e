"""``mirror://``: a copy between two buckets, once, charged to a budget that is enforced."""

from __future__ import annotations

import threading

import fsspec
import pytest
from gcs_pipelines import new_bucket

from marinbuild.store import gcs, mirror
from marinbuild.store.mirror import TransferBudgetExceeded, mirror_budget

MB = 1 << 20


@pytest.fixture
def buckets(gcs):
    local, region = f"gs://{new_bucket()}/marin", f"gs://{new_bucket()}/marin"
    mirror.configure(local_prefix=local, remote_prefixes=[region])
    try:
        yield local, region
    finally:
        mirror.configure()


def _put(url: str, data: bytes) -> None:
    gcs.filesystem().pipe_file(url, data)


def test_mirror_copies_once_and_charges_the_budget(buckets):
    local, region = buckets
    data = bytes(range(256)) * (4 * 1024)  # 1 MiB
    _put(f"{region}/documents/x.jsonl", data)
    with mirror_budget(0.01) as budget:  # ~10 MiB
        with fsspec.open("mirror://documents/x.jsonl", "rb") as f:
            assert f.read() == data
        assert budget.bytes_used == len(data)
        assert gcs.filesystem().cat_file(f"{local}/documents/x.jsonl") == data  # copied home
        assert fsspec.filesystem("mirror").cat_file("documents/x.jsonl") == data
        assert budget.bytes_used == len(data)  # the second read is local: no charge
        assert fsspec.filesystem("mirror").exists("documents/x.jsonl")
        assert not fsspec.filesystem("mirror").exists("documents/nope")


def test_a_copy_over_the_budget_raises_and_copies_nothing(buckets):
    local, region = buckets
    _put(f"{region}/documents/big.bin", b"\0" * (2 * MB))
    with mirror_budget(1 / 1024), pytest.raises(TransferBudgetExceeded, match="budget exceeded.*documents/big.bin"):
        fsspec.open("mirror://documents/big.bin", "rb").open()
    assert not gcs.filesystem().exists(f"{local}/documents/big.bin")
    err = TransferBudgetExceeded(1, 2, 3, "p")
    import pickle

    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_the_environment_sets_the_default_budget(buckets, monkeypatch):
    local, region = buckets
    _put(f"{region}/documents/y.bin", b"\1" * MB)
    monkeypatch.setenv(mirror.MARIN_MIRROR_BUDGET_GB, str(0.5 / 1024))
    monkeypatch.setattr(mirror, "_process_budget", [])
    with pytest.raises(TransferBudgetExceeded):
        fsspec.filesystem("mirror").cat_file("documents/y.bin")
    monkeypatch.setenv(mirror.MARIN_MIRROR_BUDGET_GB, "1")
    monkeypatch.setattr(mirror, "_process_budget", [])
    assert fsspec.filesystem("mirror").cat_file("documents/y.bin") == b"\1" * MB
    assert mirror.default_budget().bytes_used == MB


def test_concurrent_readers_copy_once(buckets):
    local, region = buckets
    files = {f"documents/dir/part-{i}": bytes([i]) * (64 * 1024) for i in range(3)}
    for rel, data in files.items():
        _put(f"{region}/{rel}", data)
    charged: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def reader() -> None:
        try:
            with mirror_budget(1) as budget:
                barrier.wait()
                assert fsspec.filesystem("mirror").info("documents/dir")["type"] == "directory"
                for rel, data in files.items():
                    assert fsspec.filesystem("mirror").cat_file(rel) == data
                charged.append(budget.bytes_used)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(charged) == sum(len(d) for d in files.values())  # the folder was copied once, by one reader
    assert sorted(fsspec.filesystem("mirror").ls("documents/dir", detail=False)) == sorted(files)


def test_a_missing_path_says_where_it_looked(buckets):
    with pytest.raises(FileNotFoundError, match="mirror://documents/none: not under the local prefix"):
        fsspec.filesystem("mirror").cat_file("documents/none")


def test_a_step_scope_sets_the_budget_and_the_local_prefix(buckets):
    from gcs_pipelines import new_bucket

    local, region = buckets
    _put(f"{region}/documents/z.bin", b"z" * MB)
    step_prefix = f"gs://{new_bucket()}/steps"
    with mirror.step_scope(0.5 / 1024, step_prefix), pytest.raises(TransferBudgetExceeded):
        fsspec.filesystem("mirror").cat_file("documents/z.bin")
    with mirror.step_scope(1, step_prefix) as budget:
        assert fsspec.filesystem("mirror").cat_file("documents/z.bin") == b"z" * MB
        assert budget.bytes_used == MB
    assert gcs.filesystem().exists(f"{step_prefix}/documents/z.bin")  # copied under the step's prefix
    assert not gcs.filesystem().exists(f"{local}/documents/z.bin")


def test_marins_own_mirror_filesystem_can_still_be_imported():
    """levanter imports Marin's rigging.filesystem, which registers mirror:// without clobbering: no clash."""
    pytest.importorskip("rigging.filesystem")
    import importlib

    importlib.import_module("rigging.filesystem")
    assert fsspec.get_filesystem_class("mirror") is mirror.MirrorFileSystem
