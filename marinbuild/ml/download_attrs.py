"""The ``download`` rule's attribute check, run when a BUILD file declares a target (``rule(check=...)``).

``check(values)`` raises ``AttrValueError(message, attr=...)`` for what types cannot express (one source; ``revision``
with ``hf_dataset`` only; ``checksums`` with ``url`` only, of kinds ``ml.checksums`` computes; no empty pattern;
``subdir`` inside the output; ``workers`` at least one), so a mistake is one ``path:line:col`` line in ``query`` and
``build -n``. Cheap by contract: no network, files or imports beyond the standard library and ``marinbuild.load``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from marinbuild.load.attrs import AttrValueError

HEX_LENGTHS = {"sha256": 64, "git_sha1": 40, "md5": 32, "crc32c": 8}
"""Hex digits of each checksum kind (``marinbuild.ml.checksums.KNOWN``, as ``Digests.hexdigests()`` gives them)."""

_HEX = re.compile(r"[0-9a-fA-F]+")


def check(values: Mapping[str, Any]) -> None:
    """Raise ``AttrValueError`` naming the attribute at fault when a ``download`` target's attributes disagree."""
    hf_dataset, url, revision = values.get("hf_dataset"), values.get("url"), values.get("revision")
    if hf_dataset and url:
        raise AttrValueError("give one of hf_dataset (a Hub dataset id) and url, not both", attr="url")
    if not hf_dataset and not url:
        raise AttrValueError("give the source: hf_dataset (a Hub dataset id, with a revision) or url")
    if hf_dataset and "://" in hf_dataset:
        raise AttrValueError(
            f"hf_dataset is a Hub dataset id (org/name), not a URL; give {hf_dataset!r} as url", attr="hf_dataset"
        )
    if hf_dataset and not revision:
        raise AttrValueError("hf_dataset needs a revision (a commit, tag or branch) to pin", attr="hf_dataset")
    if url and revision:
        raise AttrValueError("revision is for hf_dataset; pin a URL's content in the URL itself", attr="revision")
    checksums = values.get("checksums") or {}
    if hf_dataset and checksums:
        raise AttrValueError("checksums are for url sources; the Hub publishes its own", attr="checksums")
    for path, expected in checksums.items():
        _check_checksum(path, expected)
    for i, pattern in enumerate(values.get("patterns") or ()):
        if not pattern.strip("/"):
            raise AttrValueError(
                f"patterns[{i}] is empty; a glob relative to the source root, e.g. '**/*.jsonl'", attr="patterns"
            )
    subdir = values.get("subdir") or ""
    if ".." in subdir.split("/"):
        raise AttrValueError(f"subdir {subdir!r} leaves the output folder; give a folder inside it", attr="subdir")
    workers = values.get("workers")
    if workers is not None and workers < 1:
        raise AttrValueError(f"workers must be at least 1, got {workers}", attr="workers")


def _check_checksum(path: str, expected: Any) -> None:
    where = f"checksums[{path!r}]"
    if not path or path.startswith("/"):
        raise AttrValueError(
            f"{where}: the key is a file's path relative to the url (e.g. 'part-0.jsonl.gz')", attr="checksums"
        )
    kinds = ", ".join(HEX_LENGTHS)
    if not isinstance(expected, str):
        raise AttrValueError(
            f"{where}: expected a string '<kind>:<hex>' (kind one of {kinds}), got {expected!r}", attr="checksums"
        )
    kind, sep, digest = expected.partition(":")
    if not sep or kind not in HEX_LENGTHS:
        raise AttrValueError(f"{where}: {expected!r} is not '<kind>:<hex>' with kind one of {kinds}", attr="checksums")
    if len(digest) != HEX_LENGTHS[kind] or not _HEX.fullmatch(digest):
        raise AttrValueError(f"{where}: a {kind} is {HEX_LENGTHS[kind]} hex digits, got {digest!r}", attr="checksums")
