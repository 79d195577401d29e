"""The digests of version strings, kept between builds so an unchanged step's version text is not hashed again.

Marin's version string of a step inlines the whole version string of every dependency up to depth 4, so the
version texts of a graph add up to far more than the graph (docs/performance.md gives their size for
``bench/run.py``'s layered 10,000 steps). Every build hashed all of it twice: md5 for the output path
(``VersionTable._record``) and sha256 for the action digest (``VersionTable.action_digest``), whatever changed.

A version string is determined by its own fragments (the config's versioned values as JSON, the name, the
separators) and by the strings of the dependencies it inlines; each of those is determined by its md5 (the
engine already takes one md5 for one version: ``VersionTable._canonical_by_md5``). So the **key** of a step's
string is the sha256 of its fragments with each inlined dependency's pieces replaced by ``\\0`` and that
dependency's full md5 (no version text holds a raw ``\\0``: JSON escapes it). Equal keys mean equal strings
(by induction from the steps without dependencies, whose key is the sha256 of the string itself), so the
digests recorded under a key are the digests of the string; a key costs the hashing of a few hundred bytes,
not of the nested text.

``DigestCache`` maps key -> (md5, sha256 or None) in ``<workspace>/.marinbuild/version_digests.bin``, a sorted
table of 80-byte records (key, md5, sha256 or 32 zero bytes for none yet) looked up in place
(``core/packed_table.py``): 80 bytes per entry, where a dict of the same entries is many small objects held to
the end of the build, and copied again while written back (``bench/run.py``'s 100,000 incremental row). It is a
cache: a missing or damaged file (cut short, a bad crc32) only costs the hashing (``marinbuild clean`` drops
it). A build that hashed anything saves the entries it used (found or new), and the others too while all of
them are at most ``SLACK`` times those it used: an edit's old versions do not pile up (the file is read whole
by every build), and a command line building part of the graph does not drop the rest at once. Nothing in it
depends on the prefix, the clock or a file's signature: only on content.
"""

from __future__ import annotations

import os
from pathlib import Path

from marinbuild.core.packed_table import PackedTable

__all__ = ["FILE", "DigestCache"]

FILE = "version_digests.bin"
MAGIC = b"MBVD"
FORMAT = 2
"""Bump when what a key stands for changes (how version strings or keys are composed): older files are ignored."""
KEY_SIZE = 32
VALUE_SIZE = 48
"""md5 (16 bytes) and sha256 (32 bytes; all zero: not hashed yet)."""
_NO_SHA = bytes(32)

SLACK = 1.25
"""How many more entries than a build used its save may keep (the others are an edit's old versions, or other
command lines' steps)."""


class DigestCache:
    """``get(key)`` -> ``(md5 digest, sha256 digest or None)`` (raw bytes) of the version string with that key;
    ``put`` records them; ``save()`` after the build."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path) if path is not None else None
        self.old = PackedTable(MAGIC, FORMAT, KEY_SIZE, VALUE_SIZE)
        """The file as read: the entries of earlier builds."""
        if self.path is not None:
            self.old, _ = PackedTable.read(self.path, MAGIC, FORMAT, KEY_SIZE, VALUE_SIZE)
        self.new: dict[bytes, bytes] = {}
        """Entries this build made or changed (a new key, or a sha256 added to a found md5)."""
        self._found = 0
        """Old entries this build used and did not change."""
        self._replaced = 0
        self.dirty = False

    @classmethod
    def in_workspace(cls, cache_dir: str | os.PathLike[str]) -> DigestCache:
        return cls(Path(cache_dir, FILE))

    def _value(self, key: bytes) -> bytes | None:
        value = self.new.get(key)
        if value is None:
            i = self.old.index(key)
            if i < 0:
                return None
            if not self.old.used[i]:
                self.old.use(i)
                self._found += 1
            value = self.old.value(i)
        return value

    def get(self, key: bytes) -> tuple[bytes, bytes | None] | None:
        value = self._value(key)
        if value is None:
            return None
        sha = value[16:]
        return value[:16], (sha if sha != _NO_SHA else None)

    def put(self, key: bytes, md5: bytes, sha256: bytes | None) -> None:
        value = md5 + (sha256 or _NO_SHA)
        if len(value) != VALUE_SIZE:
            raise ValueError("an md5 and a sha256 digest, raw")
        if self._value(key) == value:
            return
        if key not in self.new:
            i = self.old.index(key)
            if i >= 0:  # an old entry changed: counted once, as a new one
                self._replaced += 1
                if self.old.used[i]:
                    self._found -= 1
                self.old.used[i] = 2
        self.new[key] = value
        self.dirty = True

    def __len__(self) -> int:
        """The entries this cache would hold if saved with every old one."""
        return len(self.old) + len(self.new) - self._replaced

    def save(self) -> None:
        """Write the file if this build added anything (atomically; a failure only costs hashing next time)."""
        if not self.dirty or self.path is None:
            return
        used = self._found + len(self.new)
        keep_unused = len(self) <= SLACK * used  # not piling up: keep the unused ones too
        self.old.write(self.path, self.new, keep_unused=keep_unused)
        self.dirty = False
