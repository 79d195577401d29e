"""The sorted packed tables behind the workspace caches (``marinbuild.core.packed_table``): lookups in place, merges
on write, and a file that is not whole read as empty, so a cache never answers a wrong digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from test_version_digests import graph, results, versioned_table

from marinbuild.core.packed_table import PackedTable
from marinbuild.core.version_digests import DigestCache

MAGIC, FORMAT = b"TEST", 1


def key(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).digest()[:16]


def table_of(path: Path, records: dict[bytes, bytes]) -> PackedTable:
    assert PackedTable(MAGIC, FORMAT, 16, 4).write(path, records, keep_unused=True, extra=b"extra")
    table, extra = PackedTable.read(path, MAGIC, FORMAT, 16, 4)
    assert extra == b"extra"
    return table


def test_every_key_is_found_and_an_absent_one_is_not(tmp_path: Path) -> None:
    records = {key(i): i.to_bytes(4, "little") for i in range(1000)}
    # keys sharing their 8-byte prefix (the bisected column) with a present key, on both sides of it
    shared = key(0)[:8]
    records[shared + bytes(8)] = b"low!"
    records[shared + b"\xff" * 8] = b"high"
    table = table_of(tmp_path / "t.bin", records)
    assert len(table) == len(records)
    for k, v in records.items():
        assert table.value(table.index(k)) == v
    assert dict(table.items()) == records
    absent = [key(i) for i in range(1000, 1100)] + [shared + b"\x01" + bytes(7), bytes(16), b"\xff" * 16]
    assert [table.index(k) for k in absent] == [-1] * len(absent)
    assert PackedTable(MAGIC, FORMAT, 16, 4).index(key(1)) == -1  # an empty table


def test_a_write_merges_new_records_and_keeps_the_used_ones(tmp_path: Path) -> None:
    table = table_of(tmp_path / "t.bin", {key(i): b"old!" for i in range(10)})
    for i in (2, 5, 7):
        table.use(table.index(key(i)))
    table.write(tmp_path / "t.bin", {key(5): b"new!", key(20): b"new!"}, keep_unused=False)
    merged, extra = PackedTable.read(tmp_path / "t.bin", MAGIC, FORMAT, 16, 4)
    assert dict(merged.items()) == {key(2): b"old!", key(5): b"new!", key(7): b"old!", key(20): b"new!"}
    assert extra == b""
    merged.write(tmp_path / "t.bin", {key(2): b"twoo"}, keep_unused=True)
    again, _ = PackedTable.read(tmp_path / "t.bin", MAGIC, FORMAT, 16, 4)
    assert dict(again.items()) == {key(2): b"twoo", key(5): b"new!", key(7): b"old!", key(20): b"new!"}
    with pytest.raises(ValueError):
        again.write(tmp_path / "t.bin", {b"short": b"new!"}, keep_unused=True)


@pytest.mark.parametrize(
    "damage",
    ["cut short", "one byte longer", "a flipped byte", "another magic", "another format", "another record size"],
)
def test_a_file_not_whole_reads_as_empty(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "t.bin"
    table_of(path, {key(i): b"abcd" for i in range(100)})
    data = bytearray(path.read_bytes())
    if damage == "cut short":
        del data[-30:]
    elif damage == "one byte longer":
        data.append(0)
    elif damage == "a flipped byte":
        data[len(data) // 2] ^= 0x01
    elif damage == "another magic":
        data[:4] = b"XXXX"
    path.write_bytes(bytes(data))
    fmt, value_size = (2, 4) if damage == "another format" else (FORMAT, 4)
    if damage == "another record size":
        value_size = 5
    table, extra = PackedTable.read(path, MAGIC, fmt, 16, value_size)
    assert len(table) == 0 and extra == b"" and table.index(key(1)) == -1


def test_a_damaged_digest_cache_costs_hashing_never_a_wrong_path(tmp_path: Path) -> None:
    """A byte of a recorded md5 flipped in the file: the build's paths are those of a build with no cache."""
    path = tmp_path / "digests.bin"
    cache = DigestCache(path)
    steps = graph(0)
    fresh = results(versioned_table(steps, None), steps)
    table = versioned_table(steps, cache)
    assert results(table, steps) == fresh
    cache.save()
    data = bytearray(path.read_bytes())
    at = data.index(hashlib.md5(table.version_strs[steps[3]].encode()).digest())  # recorded as it is

    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    again = graph(0)
    assert results(versioned_table(again, DigestCache(path)), again) == fresh
