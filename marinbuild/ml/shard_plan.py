"""How the input files of a split become shards: large files split into ranges, small files grouped.

One number decides both, ``shard_bytes`` (the ``tokenize`` option, 64 MiB by default: some ten million
tokens, small enough to spread a dataset over a cluster and lose little on a preemption, large enough that
per-shard costs are a small share; 0: every file is one shard):

- **Ranges.** A file of at least ``shard_bytes`` is split into ``ceil(size / shard_bytes)`` shards, so one
  large file does not serialise the work. Plain ``.jsonl``: equal byte ranges; a range owns the lines that
  *start* inside it (``marinbuild.ml.records``), so no boundary is found when planning and every line is
  read once. Parquet: consecutive row groups, a new range once they hold ``shard_bytes`` compressed (from
  the footer); one row group is one shard. Compressed JSON lines and JSON arrays stay one shard: a gzip or
  zstd stream cannot be entered in the middle without reading everything before.
- **Groups.** Consecutive files smaller than ``shard_bytes`` are grouped into shards of about
  ``shard_bytes``, so per-shard costs (a levanter cache, its commit, its copy into the consolidated cache)
  are paid a few times, not thousands. Where a group ends depends on the files, not their positions
  (content-defined chunking, as rsync and restic, over a list of files): after a file when the group holds
  at least ``shard_bytes / 2`` and the file's identity hashes (in [0, 1)) below ``size / (shard_bytes / 2)``,
  or when it reaches ``2 * shard_bytes``. Adding or removing a file changes its group (rarely the next),
  not every group after it: the others keep their keys and are reused.

A shard's key covers its pieces (``marinbuild.ml.shards``). A ``Piece(path, input, size, span)``'s ``span`` is
None for a whole file, else a byte range (``.jsonl``) or a row-group range (``.parquet``).
"""

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
    if shard_bytes <= 0 or size < shard_bytes:
        return [Piece(path, input_id, size)]
    ext, compression = document_format(path)
    if compression is not None:
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
