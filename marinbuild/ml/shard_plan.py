"""How the input files of a split become shards: large files split into ranges, small files grouped.

One number decides both, ``shard_bytes`` (64 MiB by default, some ten million tokens; 0: a shard per file):

- Ranges. A file of at least ``shard_bytes`` becomes ``ceil(size / shard_bytes)`` shards. Plain ``.jsonl``: byte ranges,
  a range owning the lines that start in it (``marinbuild.ml.records``), so nothing is read when planning. Parquet:
  consecutive row groups up to ``shard_bytes`` compressed. Compressed JSON lines and JSON arrays stay one shard (a
  compressed stream cannot be entered midway).
- Groups. Consecutive smaller files are grouped into shards of about ``shard_bytes``, so per-shard costs are paid a few
  times, not thousands. Group ends are content-defined (as rsync's chunks, over files): after a file once the group
  holds ``shard_bytes / 2`` and the file's identity hashes below ``size / (shard_bytes / 2)``, or at ``2 *
  shard_bytes``; adding or removing a file changes its group, not every later one.

A ``Piece(path, input, size, span)``'s ``span`` is None for a whole file, else a byte range or row-group range; a
shard's key covers its pieces (``marinbuild.ml.shards``)."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import fsspec

from marinbuild.ml.documents import document_format


@dataclass(frozen=True)
class Piece:
    """A whole file (``span`` None) or a range of it: bytes of a ``.jsonl``, row groups of a ``.parquet``."""

    path: str
    input: str
    size: int
    span: tuple[int, int] | None = None

    def label(self) -> str:
        if self.span is None:
            return self.path
        unit = "row groups" if document_format(self.path)[0] == ".parquet" else "bytes"
        return f"{self.path} [{unit} {self.span[0]}-{self.span[1]})"


def file_pieces(path: str, input_id: str, size: int, shard_bytes: int) -> list[Piece]:
    """``path`` as one piece, or as its ranges when it is at least ``shard_bytes`` and splittable."""
    ext, compression = document_format(path)  # every input is a document file (its shard key reads the format)
    if shard_bytes <= 0 or size < shard_bytes or compression is not None:
        return [Piece(path, input_id, size)]
    if ext == ".jsonl":
        n = math.ceil(size / shard_bytes)
        bounds = [size * i // n for i in range(n + 1)]
        return [Piece(path, input_id, bounds[i + 1] - bounds[i], (bounds[i], bounds[i + 1])) for i in range(n)]
    if ext == ".parquet":
        return _row_group_pieces(path, input_id, size, shard_bytes)
    return [Piece(path, input_id, size)]


def _row_group_pieces(path: str, input_id: str, size: int, shard_bytes: int) -> list[Piece]:
    import pyarrow.parquet as pq

    with fsspec.open(path, "rb") as f:
        meta = pq.ParquetFile(f).metadata
        sizes = [
            sum(meta.row_group(g).column(c).total_compressed_size for c in range(meta.num_columns))
            for g in range(meta.num_row_groups)
        ]
    if len(sizes) <= 1:
        return [Piece(path, input_id, size)]
    pieces, first, held = [], 0, 0
    for group, group_size in enumerate(sizes):
        held += group_size
        if held >= shard_bytes or group == len(sizes) - 1:
            pieces.append(Piece(path, input_id, held, (first, group + 1)))
            first, held = group + 1, 0
    return pieces if len(pieces) > 1 else [Piece(path, input_id, size)]


def group(files: list[list[Piece]], shard_bytes: int) -> list[list[Piece]]:
    """The shards of a split, in input order: each file's ranges alone, consecutive small files grouped."""
    shards: list[list[Piece]] = []
    current: list[Piece] = []
    held = 0
    for pieces in files:
        whole = pieces[0]
        if len(pieces) > 1 or whole.span is not None or shard_bytes <= 0 or whole.size >= shard_bytes:
            if current:
                shards.append(current)
                current, held = [], 0
            shards.extend([p] for p in pieces)
            continue
        current.append(whole)
        held += whole.size
        half = shard_bytes / 2
        if held >= 2 * shard_bytes or (held >= half and _unit(whole.input) < whole.size / half):
            shards.append(current)
            current, held = [], 0
    if current:
        shards.append(current)
    return shards


def _unit(input_id: str) -> float:
    """A file's identity as a number in [0, 1), the same wherever and whenever it is planned."""
    return int.from_bytes(hashlib.sha256(input_id.encode()).digest()[:8], "big") / 2.0**64
