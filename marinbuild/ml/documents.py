"""What a document file is: its format and compression, from its name alone (a leaf of ``marinbuild.ml``)."""

from __future__ import annotations

import os

DOC_SUFFIXES = (".jsonl", ".json", ".parquet")
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd", ".zstd": "zstd", ".bz2": "bz2", ".xz": "xz"}


def document_format(path: str) -> tuple[str, str | None]:
    """(format suffix, compression) of a document file, e.g. ``(".jsonl", "gzip")``."""
    base, ext = os.path.splitext(path)
    compression = COMPRESSIONS.get(ext)
    if compression is not None:
        base, ext = os.path.splitext(base)
    if ext not in DOC_SUFFIXES:
        raise ValueError(f"{path}: unsupported document file (expected .jsonl[.gz|.zst], .json or .parquet)")
    return ext, compression


def is_document(path: str) -> bool:
    """Whether ``path`` names a document file ``document_format`` reads."""
    try:
        document_format(path)
    except ValueError:
        return False
    return True
