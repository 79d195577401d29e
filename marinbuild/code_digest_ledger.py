"""What the code records of local outputs held when last read, so a build reads only the records that changed.

Every full build checks the code of every built output it plans (``marinbuild.code_digest.CodeChanges``):
the ``.marinbuild_code.json`` beside the output against the step's code now. The record of an output is
rewritten only when its step runs, so from one build to the next nearly every record is the same file; reading
and parsing each again made the check grow with the whole graph. The ledger,
``<workspace>/.marinbuild/code_records.bin``, keeps for each local output path the record's signature
(``(mtime_ns, size, inode)``, as the analysis snapshot signs its inputs) and the files it held. A record whose
signature is unchanged is answered from the ledger; any other (new, rewritten, gone) is read as before. The
comparison with the step's code now is done on every check, so an edit of a code file is always seen: only the
reading of unchanged records is saved.

Exactness: a signature is trusted only if the record is older than ``RACY_NS`` when it is read (a file
rewritten within one clock tick, in place, at the same size, would keep its signature), the same rule as the
snapshot's. A record this build wrote (its step just ran) is therefore read again by the next check, which
is proportional to the steps that ran. Remote outputs (``gs://``) are not in the ledger: a signature costs a
request there, as the read does.

The ledger is a cache: a missing, damaged (cut short, a bad crc32) or unwritable file only costs the reads
(``marinbuild clean`` drops it with the rest of ``.marinbuild/``). It holds the outputs the latest check saw
(another command line's outputs are read again once), as a sorted table of 48-byte records looked up in place
(``core/packed_table.py``): the key is the blake2b-128 digest of the record's path, the value its signature and
the index of what it held in a short list of distinct contents (most steps of a graph run the same code), kept
after the records. A table rather than a dict of paths: at 100,000 outputs a dict of the paths and their
signatures was tens of MB held at the end of a build, beside everything the build holds. Two paths with the
same digest cannot mix up records: an entry is trusted only if the file's inode, mtime and size match too, and
two files existing at once do not share an inode.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import struct
import time
from pathlib import Path
from typing import Any

from marinbuild.core.packed_table import PackedTable

__all__ = ["FILE", "Ledger"]

FILE = "code_records.bin"
MAGIC = b"MBCR"
FORMAT = 3
"""Bump when what the file holds or means changes: an older one is then ignored."""
RACY_NS = 2_000_000_000
"""A record changed this recently could be rewritten again within one clock tick without a new signature."""
KEY_SIZE = 16
_ENTRY = struct.Struct("<qqqq")
"""An entry's value: the record's mtime_ns, size, inode, and the index of what it held in ``contents``."""
COMPACT_OVER = 16
"""Contents no entry names any more are dropped (the entries renumbered) once there are more than this many."""

Signature = tuple[int, int, int]


def _key(record_path: str) -> bytes:
    return hashlib.blake2b(os.fsencode(record_path), digest_size=KEY_SIZE).digest()


class Ledger:
    """``lookup(record_path)`` -> the files the record held at its current signature, or None (read it, then
    ``remember``); ``save()`` once after a check."""

    def __init__(self, cache_dir: str | os.PathLike[str]):
        self.path = Path(cache_dir, FILE)
        self.table = PackedTable(MAGIC, FORMAT, KEY_SIZE, _ENTRY.size)
        """The entries of the last check; those this check confirmed are marked used."""
        self.contents: list[Any] = []
        """What records held: a dict of files, or None (nothing usable)."""
        self.new: dict[bytes, bytes] = {}
        """Entries this check remembered (read records)."""
        self._index: dict[tuple[tuple[str, str], ...] | None, int] = {}
        self._named: set[int] = set()
        """The indexes in ``contents`` that the entries this check confirmed name."""
        self._signatures: dict[str, Signature | None] = {}
        """Signatures of the records ``lookup`` said to read, for ``remember``."""
        self.dirty = False
        self.limit = time.time_ns() - RACY_NS
        self._read()

    def _read(self) -> None:
        table, extra = PackedTable.read(self.path, MAGIC, FORMAT, KEY_SIZE, _ENTRY.size)
        try:
            contents = marshal.loads(extra) if len(table) else []
        except (ValueError, EOFError, TypeError):
            return
        if not isinstance(contents, list):
            return
        self.table, self.contents = table, contents
        self._index = {_content_key(c): i for i, c in enumerate(contents) if c is None or isinstance(c, dict)}

    def lookup(self, record_path: str) -> tuple[bool, dict[str, str] | None]:
        """``(True, files)`` when the ledger knows the record at its current signature (``files`` None: the record
        held nothing usable); ``(False, None)`` when the record must be read."""
        try:
            st = os.stat(record_path)
            sig: Signature | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except (FileNotFoundError, NotADirectoryError):
            sig = None
        except OSError:
            self._signatures[record_path] = None
            self.dirty = True  # its entry, if any, is dropped
            return False, None
        key = _key(record_path)
        i = self.table.index(key)
        if sig is None:  # no record: nothing to say, nothing to remember
            if i >= 0 or self.new.pop(key, None) is not None:
                self.dirty = True  # its entry is not used, so it is dropped
            return True, None
        value = self.new.get(key)
        if value is None and i >= 0:
            value = self.table.value(i)
        if value is not None:
            mtime_ns, size, inode, index = _ENTRY.unpack(value)
            if (mtime_ns, size, inode) == sig and 0 <= index < len(self.contents):
                content = self.contents[index]
                if content is None or isinstance(content, dict):
                    if i >= 0 and key not in self.new:
                        self.table.use(i)
                        self._named.add(index)
                    return True, content
        self._signatures[record_path] = sig
        self.dirty = True
        return False, None

    def remember(self, record_path: str, files: dict[str, str] | None) -> None:
        """What the record held when just read (after ``lookup`` said to read it); kept if its signature is old
        enough to trust."""
        sig = self._signatures.pop(record_path, None)
        plain = files is None or all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        key = _key(record_path)
        if sig is None or sig[0] > self.limit or not plain:
            self.new.pop(key, None)
            return
        content = _content_key(files)
        index = self._index.get(content)
        if index is None:
            index = self._index[content] = len(self.contents)
            self.contents.append(dict(files) if files is not None else None)
        self.new[key] = _ENTRY.pack(*sig, index)
        self.dirty = True

    def save(self) -> None:
        """Write the ledger if a check changed it (atomically; a failure only costs reads next time): the entries
        this check confirmed or remembered, nothing else."""
        if not self.dirty:
            return
        self.dirty = False
        contents, table, new = self.contents, self.table, self.new
        named = self._named | {_ENTRY.unpack(v)[3] for v in new.values()}
        if len(contents) - len(named) > COMPACT_OVER:  # rare (many edits of the code): renumber what is still named
            renumber = {old: n for n, old in enumerate(sorted(named))}
            kept = {
                table.key(i): _renumbered(table.value(i), renumber) for i in range(len(table)) if table.used[i] == 1
            }
            kept.update((k, _renumbered(v, renumber)) for k, v in new.items())
            contents = [contents[i] for i in sorted(named)]
            table, new = PackedTable(MAGIC, FORMAT, KEY_SIZE, _ENTRY.size), kept
        table.write(self.path, new, keep_unused=False, extra=marshal.dumps(contents))


def _renumbered(value: bytes, renumber: dict[int, int]) -> bytes:
    mtime_ns, size, inode, index = _ENTRY.unpack(value)
    return _ENTRY.pack(mtime_ns, size, inode, renumber[index])


def _content_key(files: Any) -> tuple[tuple[str, str], ...] | None:
    return tuple(sorted(files.items())) if isinstance(files, dict) else None
