"""The texts of one document file, with every bad record named by file and line (or row).

``read_texts`` yields the ``text_key`` string of each record of a JSON-lines file (optionally compressed), a JSON array
(``.json``; JSON lines when it does not start with ``[``, as dolma's) or Parquet, or of one ``span`` of it
(``ml.shard_plan``): a plain ``.jsonl``'s byte range owns the lines that start in it, a Parquet's is a range of row
groups. Bad records are named by absolute line (row). A bad line or record raises ``BadRecordError`` naming
``path:line``, or with ``skip_bad`` is skipped and counted; an unreadable body raises naming the last line read, or with
``skip_bad`` ends the file (``counts.truncated``). Blank lines are not records. No heavy imports: this runs in every
tokenize worker."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import fsspec

from marinbuild.ml.documents import document_format

_STREAM_ERRORS: tuple[type[BaseException], ...] = (EOFError, OSError, zlib.error, UnicodeDecodeError)


class BadRecordError(ValueError):
    """A record (or the file around it) cannot be read; the message starts with ``path:line``."""

    def __init__(self, path: str, where: str, reason: str):
        super().__init__(f"{path}:{where}: {reason}")
        self.path = path
        self.where = where
        self.reason = reason

    def __reduce__(self) -> tuple[type[BadRecordError], tuple[str, str, str]]:  # crosses process boundaries
        return BadRecordError, (self.path, self.where, self.reason)


@dataclass
class ReadCounts:
    records: int = 0
    skipped: int = 0
    examples: list[str] = field(default_factory=list)  # the first few skipped, as ``path:line: reason``
    truncated: str | None = None  # where an unreadable stream was cut off (``skip_bad`` only)

    def bad(self, error: BadRecordError, skip_bad: bool, cause: BaseException | None = None) -> None:
        """Count ``error`` as a skipped record when ``skip_bad``; else raise it (from ``cause``, if given)."""
        if not skip_bad:
            if cause is not None:
                raise error from cause
            raise error
        self.skipped += 1
        if len(self.examples) < 5:
            self.examples.append(str(error))

    def cut(self, error: BadRecordError, skip_bad: bool, cause: BaseException) -> None:
        """The rest of the file cannot be read: as ``bad``, and note where the stream was cut off."""
        self.bad(error, skip_bad, cause)
        self.truncated = f"{error.path}:{error.where}"


def is_json_array(path: str, compression: str | None) -> bool:
    """Whether a ``.json`` file is a JSON array (its first character ``[``), not JSON lines."""
    try:
        with fsspec.open(path, "rt", compression=compression, encoding="utf-8") as f:
            return f.read(256).lstrip()[:1] == "["
    except _STREAM_ERRORS:
        return True  # the array reader names the file and what is wrong with it


def _text_of(record: Any, text_key: str, path: str, where: str) -> str:
    if not isinstance(record, dict):
        raise BadRecordError(path, where, f"record is a {type(record).__name__}, not a JSON object")
    text = record.get(text_key)
    if text is None:
        raise BadRecordError(path, where, f"no field {text_key!r} (fields: {sorted(record)[:10]})")
    if not isinstance(text, str):
        raise BadRecordError(path, where, f"field {text_key!r} is a {type(text).__name__}, not a string")
    return text


def read_texts(
    path: str, text_key: str, counts: ReadCounts, skip_bad: bool = False, span: tuple[int, int] | None = None
) -> Iterator[str]:
    """The texts of ``path`` (or of its ``span``) in order; ``counts`` is filled in as they are read."""
    ext, compression = document_format(path)
    if span is not None and not (compression is None and ext in (".jsonl", ".parquet")):
        raise ValueError(f"{path}: only plain .jsonl and .parquet files are read in ranges")
    if ext == ".jsonl" or (ext == ".json" and not is_json_array(path, compression)):
        yield from _jsonl(path, compression, span, text_key, counts, skip_bad)
    elif ext == ".parquet":
        yield from _parquet(path, span, compression, text_key, counts, skip_bad)
    else:
        yield from _whole(path, compression, text_key, counts, skip_bad)


def lines_before(path: str, offset: int) -> int:
    """How many lines end before byte ``offset`` of ``path`` (``\n`` counted in blocks)."""
    count = 0
    with fsspec.open(path, "rb") as f:
        left = offset
        while left > 0:
            block = f.read(min(1 << 24, left))
            if not block:
                break
            count += block.count(b"\n")
            left -= len(block)
    return count


def _jsonl(
    path: str, compression: str | None, span: tuple[int, int] | None, text_key: str, counts: ReadCounts, skip_bad: bool
) -> Iterator[str]:
    start, end = span if span is not None else (0, None)
    with fsspec.open(path, "rb", compression=compression) as f:
        pos = start
        if start > 0:
            f.seek(start - 1)
            if f.read(1) != b"\n":  # a line straddles ``start``: it belongs to the range before
                pos += len(f.readline())
        owned = pos  # the first line this range owns starts here
        first_line: list[int] = [] if owned > 0 else [1]

        def where(n: int) -> str:
            if not first_line:
                first_line.append(lines_before(path, owned) + 1)
            return f"line {first_line[0] + n}"

        n = -1
        while end is None or pos < end:
            try:
                line = f.readline()
            except _STREAM_ERRORS as exc:
                reason = f"cannot read the file past {where(n)} ({type(exc).__name__}: {exc})"
                counts.cut(BadRecordError(path, where(n + 1), reason), skip_bad, exc)
                return
            if not line:
                return
            pos += len(line)
            n += 1
            if not line.strip():
                continue
            try:
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    raise BadRecordError(path, where(n), f"not JSON ({exc})") from exc
                text = record.get(text_key) if isinstance(record, dict) else None
                if not isinstance(text, str):  # name the line only for a bad record (``where`` may count lines)
                    text = _text_of(record, text_key, path, where(n))
            except BadRecordError as error:
                counts.bad(error, skip_bad)
                continue
            counts.records += 1
            yield text


def _parquet(
    path: str, span: tuple[int, int] | None, compression: str | None, text_key: str, counts: ReadCounts, skip_bad: bool
) -> Iterator[str]:
    """Row groups ``span`` (all by default), one at a time; rows named by their index in the file."""
    import pyarrow.parquet as pq

    row = 0
    try:
        with fsspec.open(path, "rb", compression=compression) as f:
            parquet = pq.ParquetFile(f)
            first, end = span if span is not None else (0, parquet.metadata.num_row_groups)
            row = sum(parquet.metadata.row_group(i).num_rows for i in range(first))
            for group in range(first, end):
                records = parquet.read_row_group(group).to_pylist()
                for record in records:
                    try:
                        text = _text_of(record, text_key, path, f"row {row}")
                    except BadRecordError as error:
                        counts.bad(error, skip_bad)
                    else:
                        counts.records += 1
                        yield text
                    row += 1
    except _STREAM_ERRORS + (ValueError,) as exc:
        if isinstance(exc, BadRecordError):
            raise
        counts.cut(
            BadRecordError(path, f"row {row}", f"cannot read the file ({type(exc).__name__}: {exc})"), skip_bad, exc
        )


def _whole(path: str, compression: str | None, text_key: str, counts: ReadCounts, skip_bad: bool) -> Iterator[str]:
    try:
        with fsspec.open(path, "rt", compression=compression, encoding="utf-8") as f:
            records = json.load(f)
        if not isinstance(records, list):
            raise ValueError("a .json document file holds a JSON array of records")
    except _STREAM_ERRORS + (ValueError,) as exc:
        reason = f"cannot read the file ({type(exc).__name__}: {exc})"
        counts.cut(BadRecordError(path, "item 0", reason), skip_bad, exc)
        return
    for index, record in enumerate(records):
        try:
            text = _text_of(record, text_key, path, f"item {index}")
        except BadRecordError as error:
            counts.bad(error, skip_bad)
            continue
        counts.records += 1
        yield text
