"""Checksums of a byte stream, computed while it is copied, and checked against what a source publishes.

``Digests(names)`` is updated chunk by chunk: ``sha256`` (always; the Hub's LFS ``oid``), ``git_sha1`` (the Hub's for
small files; needs the size), ``md5`` and ``crc32c`` (GCS's, base64: ``from_gcs_base64``). ``mismatches(expected,
actual)`` names each that differs."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

KNOWN = ("sha256", "git_sha1", "md5", "crc32c")


class Digests:
    """Running checksums of one stream."""

    def __init__(self, names: set[str] | frozenset[str], size: int | None = None):
        unknown = set(names) - set(KNOWN)
        if unknown:
            raise ValueError(f"unknown checksum kind(s) {sorted(unknown)} (known: {', '.join(KNOWN)})")
        self._hashes: dict[str, Any] = {"sha256": hashlib.sha256()}
        if "md5" in names:
            self._hashes["md5"] = hashlib.md5(usedforsecurity=False)
        if "git_sha1" in names:
            if size is None:
                raise ValueError("a git blob sha1 needs the file's size in advance")
            blob = hashlib.sha1(usedforsecurity=False)
            blob.update(b"blob %d\0" % size)
            self._hashes["git_sha1"] = blob
        if "crc32c" in names:
            import google_crc32c

            self._hashes["crc32c"] = google_crc32c.Checksum()
        self.size = 0

    def update(self, chunk: bytes) -> None:
        self.size += len(chunk)
        for h in self._hashes.values():
            h.update(chunk)

    def hexdigests(self) -> dict[str, str]:
        return {name: h.digest().hex() for name, h in self._hashes.items()}


def from_gcs_base64(value: str) -> str:
    """GCS's base64 ``md5Hash``/``crc32c`` as hex."""
    return base64.b64decode(value).hex()


def parse_expected(value: str) -> tuple[str, str]:
    """``"sha256:<hex>"`` (or ``md5:``, ``git_sha1:``, ``crc32c:``) as ``(kind, hex)``."""
    kind, sep, digest = value.partition(":")
    if not sep or kind not in KNOWN or not digest:
        raise ValueError(f"checksum {value!r}: write it as <kind>:<hex>, kind one of {', '.join(KNOWN)}")
    return kind, digest.lower()


def mismatches(expected: dict[str, str], actual: dict[str, str]) -> list[str]:
    """``"<kind> <actual> != published <expected>"`` for each expected checksum that differs."""
    return [
        f"{kind} {actual.get(kind)} != published {want}"
        for kind, want in sorted(expected.items())
        if actual.get(kind) != want.lower()
    ]
