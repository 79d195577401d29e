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

``DigestCache`` maps key -> (md5, sha256 or None) in ``<workspace>/.marinbuild/version_digests.bin``. It is a
cache: a missing or damaged file only costs the hashing (``marinbuild clean`` drops it). A build that hashed
anything saves the entries it used (found or new), and the others too while all of them are at most ``SLACK``
times those it used: an edit's old versions do not pile up (the file is read whole by every build), and a
command line building part of the graph does not drop the rest at once. Nothing in it depends on the prefix,
the clock or a file's signature: only on content.
"""

from __future__ import annotations

import marshal
import os
from pathlib import Path

__all__ = ["FILE", "DigestCache"]

FILE = "version_digests.bin"
FORMAT = 1
"""Bump when what a key stands for changes (how version strings or keys are composed): older files are ignored."""


SLACK = 1.25
"""How many more entries than a build used its save may keep (the others are an edit's old versions, or other
command lines' steps)."""


class DigestCache:
    """``get(key)`` -> ``(md5 digest, sha256 digest or None)`` (raw bytes) of the version string with that key;
    ``put`` records them; ``save()`` after the build."""

    def __init__(self, path: str | os.PathLike[str] | None):
        self.path = Path(path) if path is not None else None
        self.old: dict[bytes, bytes] = {}
        self.used: dict[bytes, bytes] = {}
        """The entries this build found or made (a reference to each found value, not a copy)."""
        self.dirty = False
        if self.path is not None:
            try:
                fmt, entries = marshal.loads(self.path.read_bytes())
                if fmt == FORMAT and isinstance(entries, dict):
                    self.old = entries
            except (OSError, ValueError, EOFError, TypeError):
                pass

    @classmethod
    def in_workspace(cls, cache_dir: str | os.PathLike[str]) -> DigestCache:
        return cls(Path(cache_dir, FILE))

    def get(self, key: bytes) -> tuple[bytes, bytes | None] | None:
        value = self.used.get(key)
        if value is None:
            value = self.old.get(key)
            if value is None or len(value) not in (16, 48):
                return None
            self.used[key] = value
        return value[:16], value[16:] or None

    def put(self, key: bytes, md5: bytes, sha256: bytes | None) -> None:
        value = md5 + (sha256 or b"")
        if self.used.get(key) != value:
            self.used[key] = value
            self.dirty = True

    def save(self) -> None:
        """Write the file if this build added anything (atomically; a failure only costs hashing next time)."""
        if not self.dirty or self.path is None:
            return
        from marinbuild.core.private_file import write_private_file

        entries = self.used
        if len(self.old) + len(self.used) <= SLACK * len(self.used):  # not piling up: keep the unused ones too
            entries = {**self.old, **self.used}
        write_private_file(self.path, marshal.dumps((FORMAT, entries)))
        self.dirty = False
