"""A cache file of fixed-size records sorted by key, looked up in place: no Python object per entry.

The workspace caches that hold one entry per step of the graph (``core/version_digests.py``,
``code_digest_ledger.py``) were dicts read whole from ``marshal`` at every build: at 100,000 steps two dicts of
100,000 keys and values, a few tens of MB of small objects beside a build's own tables, and a third dict and
the encoded text again when written back. Here the file's bytes are the table: one ``bytes`` object,
searched by ``bisect`` (in C) over a column of each key's first 8 bytes seen as a ``memoryview`` of unsigned
64-bit integers, then one comparison of the whole key. Keys are digests (uniform bytes), so a prefix of 8 bytes
nearly never repeats; a repeated prefix is handled (the records with it are compared in turn).

The file::

    header   magic (4 bytes), format (u32), count (u64), key size (u16), value size (u16), crc32 (u32), extra size (u64)
    prefixes count x u64 in the machine's byte order: each key's first 8 bytes read big-endian (numeric order is
             key order)
    records  count x (key, value), sorted by key
    extra    bytes the owner keeps beside the records (the ledger's list of code records)

Contract: ``PackedTable.read(path, magic, format, key_size, value_size)`` gives the table and its extra bytes;
a missing file, a file of another magic, format or record size, a file cut short or too long, and a file whose
crc32 does not match (a torn or damaged write) all give an empty table, never a wrong record: the owners are
caches, an empty one only costs the work it saves. ``index(key)`` is the record's index or -1; ``value(i)`` its
value; ``use(i)`` marks it used by this build (``used``, one byte per record). ``write(path, new,
keep_unused, extra)`` writes the merged table atomically (``write_private_file``): the old records (all, or
only those used) with ``new`` (a dict key -> value, which wins over an old record of the same key) merged in
key order. The merge copies runs of old records as slices: an incremental build, which adds or replaces a few
records, writes the file without touching the others one by one.

Hand-written rather than ``dbm``/``sqlite3``: those keep their own pages and journal, cost a query per lookup
through a binding, and need no less code around them to keep the file a cache that is replaced whole and
atomically; a sorted array searched by ``bisect`` is the standard structure for a table written once and read
many times.
"""

from __future__ import annotations

import bisect
import os
import re
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PackedTable"]

_HEAD = struct.Struct("<4sIQHHIQ")
"""magic, format, count, key size, value size, crc32 of the rest, extra size (32 bytes: the prefixes stay aligned)."""
_USED_RUN = re.compile(rb"\x01+")


def _prefix(key: bytes) -> bytes:
    """The prefix column's entry of ``key``: its first 8 bytes as a u64 of this machine's byte order (what the
    ``memoryview`` cast reads). A file from a machine of the other order only misses: keys are compared whole."""
    return key[7::-1] if sys.byteorder == "little" else key[:8]


class PackedTable:
    """Sorted records of ``key_size + value_size`` bytes held as the file's bytes (see the module docstring)."""

    def __init__(self, magic: bytes, fmt: int, key_size: int, value_size: int, data: bytes = b"", count: int = 0):
        if key_size < 8:
            raise ValueError("keys are at least 8 bytes (their prefix column)")
        self.magic, self.format, self.key_size, self.value_size = magic, fmt, key_size, value_size
        self.record_size = key_size + value_size
        self.count = count
        self._data = data
        self._records = _HEAD.size + 8 * count
        self._prefixes = memoryview(data)[_HEAD.size : self._records].cast("Q") if count else memoryview(b"").cast("Q")
        self.used = bytearray(count)
        """One byte per record: 1 once this build used it (``use``)."""

    @classmethod
    def read(
        cls, path: str | os.PathLike[str], magic: bytes, fmt: int, key_size: int, value_size: int
    ) -> tuple[PackedTable, bytes]:
        """The table in ``path`` and its extra bytes; an empty table and b"" if the file is missing or not whole."""
        empty = cls(magic, fmt, key_size, value_size)
        try:
            data = Path(path).read_bytes()
        except OSError:
            return empty, b""
        if len(data) < _HEAD.size:
            return empty, b""
        found_magic, found_fmt, count, ksize, vsize, crc, extra_size = _HEAD.unpack_from(data)
        record_size = key_size + value_size
        if (found_magic, found_fmt, ksize, vsize) != (magic, fmt, key_size, value_size):
            return empty, b""
        if len(data) != _HEAD.size + count * (8 + record_size) + extra_size:
            return empty, b""
        if zlib.crc32(memoryview(data)[_HEAD.size :]) != crc:
            return empty, b""
        table = cls(magic, fmt, key_size, value_size, data, count)
        return table, data[len(data) - extra_size :] if extra_size else b""

    def __len__(self) -> int:
        return self.count

    def _position(self, key: bytes) -> tuple[int, bool]:
        """The index of the first record whose key is not less than ``key``, and whether it is ``key``."""
        prefix = int.from_bytes(key[:8], "big")
        prefixes, data, size, base = self._prefixes, self._data, self.record_size, self._records
        i = bisect.bisect_left(prefixes, prefix)
        while i < self.count and prefixes[i] == prefix:
            at = base + i * size
            found = data[at : at + self.key_size]
            if found >= key:
                return i, found == key
            i += 1
        return i, False

    def index(self, key: bytes) -> int:
        """The index of the record of ``key``, or -1."""
        i, exact = self._position(key)
        return i if exact else -1

    def key(self, i: int) -> bytes:
        at = self._records + i * self.record_size
        return self._data[at : at + self.key_size]

    def value(self, i: int) -> bytes:
        at = self._records + i * self.record_size + self.key_size
        return self._data[at : at + self.value_size]

    def use(self, i: int) -> None:
        self.used[i] = 1

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value), in key order (for inspection; a build looks records up by key)."""
        for i in range(self.count):
            yield self.key(i), self.value(i)

    def write(
        self, path: str | os.PathLike[str], new: dict[bytes, bytes], *, keep_unused: bool, extra: bytes = b""
    ) -> bool:
        """Write the merged table to ``path`` atomically (see the module docstring); False if the disk refused."""
        from marinbuild.core.private_file import write_private_file

        view = memoryview(self._data)
        size, base = self.record_size, self._records
        prefixes: list[bytes | memoryview] = []
        records: list[bytes | memoryview] = []
        count = 0

        def old_run(start: int, end: int) -> None:
            nonlocal count
            if start < end:
                prefixes.append(view[_HEAD.size + 8 * start : _HEAD.size + 8 * end])
                records.append(view[base + size * start : base + size * end])
                count += end - start

        def old(start: int, end: int) -> None:
            if keep_unused:
                old_run(start, end)
            else:
                for run in _USED_RUN.finditer(self.used, start, end):
                    old_run(run.start(), run.end())

        done = 0
        for key, value in sorted(new.items()):
            if len(key) != self.key_size or len(value) != self.value_size:
                raise ValueError(
                    f"a record of {len(key)} + {len(value)} bytes in a table of {self.key_size} + {self.value_size}"
                )
            at, exact = self._position(key)
            old(done, at)
            prefixes.append(_prefix(key))
            records.append(key + value)
            count += 1
            done = at + 1 if exact else at
        old(done, self.count)
        crc = 0
        for piece in (*prefixes, *records, extra):
            crc = zlib.crc32(piece, crc)
        head = _HEAD.pack(self.magic, self.format, count, self.key_size, self.value_size, crc, len(extra))
        return write_private_file(Path(path), b"".join([head, *prefixes, *records, extra]))
