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

The ledger is a cache: a missing, damaged or unwritable file only costs the reads (``marinbuild clean``
drops it with the rest of ``.marinbuild/``). It holds the outputs the latest check saw (another command
line's outputs are read again once), each as its path and 32 packed bytes: the file is read whole at every
check, so it is kept small.
"""

from __future__ import annotations

import marshal
import os
import struct
import time
from pathlib import Path
from typing import Any

__all__ = ["FILE", "Ledger"]

FILE = "code_records.bin"
FORMAT = 2
"""Bump when what the file holds or means changes: an older one is then ignored."""
RACY_NS = 2_000_000_000
"""A record changed this recently could be rewritten again within one clock tick without a new signature."""
_ENTRY = struct.Struct("<qqqq")
"""An entry's value: the record's mtime_ns, size, inode, and the index of what it held in ``contents``."""

Signature = tuple[int, int, int]


class Ledger:
    """``lookup(record_path)`` -> the files the record held at its current signature, or None (read it, then
    ``remember``); ``save()`` once after a check."""

    def __init__(self, cache_dir: str | os.PathLike[str]):
        self.path = Path(cache_dir, FILE)
        self.entries: dict[str, bytes] = {}
        """record path -> ``_ENTRY`` of (mtime_ns, size, inode, index in ``contents``)."""
        self.contents: list[dict[str, str] | None] = []
        self._index: dict[tuple[tuple[str, str], ...] | None, int] = {}
        self._seen: set[str] = set()
        self._signatures: dict[str, Signature | None] = {}
        self.dirty = False
        self.limit = time.time_ns() - RACY_NS
        self._read()

    def _read(self) -> None:
        try:
            fmt, entries, contents = marshal.loads(self.path.read_bytes())
        except (OSError, ValueError, EOFError, TypeError):
            return
        if fmt != FORMAT or not isinstance(entries, dict) or not isinstance(contents, list):
            return
        self.entries, self.contents = entries, contents
        self._index = {_content_key(c): i for i, c in enumerate(contents)}

    def lookup(self, record_path: str) -> tuple[bool, dict[str, str] | None]:
        """``(True, files)`` when the ledger knows the record at its current signature (``files`` None: the record
        held nothing usable); ``(False, None)`` when the record must be read."""
        self._seen.add(record_path)
        try:
            st = os.stat(record_path)
            sig: Signature | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except (FileNotFoundError, NotADirectoryError):
            sig = None
        except OSError:
            self._signatures[record_path] = None
            return False, None
        self._signatures[record_path] = sig
        if sig is None:  # no record: nothing to say, nothing to remember
            if record_path in self.entries:
                del self.entries[record_path]
                self.dirty = True
            return True, None
        known = self.entries.get(record_path)
        if known is not None and len(known) == _ENTRY.size:
            mtime_ns, size, inode, index = _ENTRY.unpack(known)
            if (mtime_ns, size, inode) == sig and 0 <= index < len(self.contents):
                return True, self.contents[index]
        return False, None

    def remember(self, record_path: str, files: dict[str, str] | None) -> None:
        """What the record held when just read (after ``lookup`` said to read it); kept if its signature is old
        enough to trust."""
        sig = self._signatures.get(record_path)
        plain = files is None or all(isinstance(k, str) and isinstance(v, str) for k, v in files.items())
        if sig is None or sig[0] > self.limit or not plain:
            if self.entries.pop(record_path, None) is not None:
                self.dirty = True
            return
        key = _content_key(files)
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = len(self.contents)
            self.contents.append(dict(files) if files is not None else None)
        self.entries[record_path] = _ENTRY.pack(*sig, index)
        self.dirty = True

    def save(self) -> None:
        """Write the ledger if a check changed it (atomically; a failure only costs reads next time)."""
        if not self.dirty:
            return
        from marinbuild.core.private_file import write_private_file

        # Saved at the end of a build, while the build's memory is still held: no copy of the entries' values.
        seen = {p: e for p, e in self.entries.items() if p in self._seen and len(e) == _ENTRY.size}
        used = sorted({_ENTRY.unpack(e)[3] for e in seen.values()})
        if used == list(range(len(self.contents))):
            body: tuple[Any, ...] = (FORMAT, seen, self.contents)
        else:  # records of code that no output holds any more: renumber what is left
            renumber = {old: new for new, old in enumerate(used)}
            for p, e in seen.items():
                mtime_ns, size, inode, index = _ENTRY.unpack(e)
                seen[p] = _ENTRY.pack(mtime_ns, size, inode, renumber[index])
            body = (FORMAT, seen, [self.contents[i] for i in used])
        write_private_file(self.path, marshal.dumps(body))
        self.dirty = False


def _content_key(files: Any) -> tuple[tuple[str, str], ...] | None:
    return tuple(sorted(files.items())) if isinstance(files, dict) else None
