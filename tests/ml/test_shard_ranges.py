"""Shards smaller than a file and larger than one: ranges of plain JSON lines and Parquet read every record
exactly once, bad records are named by their line (row) in the whole file, and small files are grouped so
that adding a file changes only the group it falls in. Real files, read by ``marinbuild.ml.records``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from marinbuild.ml.records import BadRecordError, ReadCounts, read_texts
from marinbuild.ml.shard_plan import Piece, file_pieces, group


def _texts(path: Path, pieces: list[Piece], skip_bad: bool = False) -> tuple[list[str], int]:
    out: list[str] = []
    skipped = 0
    for piece in pieces:
        counts = ReadCounts()
        out.extend(read_texts(str(path), "text", counts, skip_bad=skip_bad, span=piece.span))
        skipped += counts.skipped
    return out, skipped


def _awkward_jsonl(path: Path) -> list[str]:
    """Lines of unequal length, a CRLF line end, a blank line, non-ASCII text and no newline at the end."""
    texts = ["a", "bb " * 20, "ünïcode ✓", "crlf line", "x", "last, without a newline"]
    body = (
        json.dumps({"text": texts[0]})
        + "\n"
        + json.dumps({"text": texts[1]})
        + "\n"
        + json.dumps({"text": texts[2]}, ensure_ascii=False)
        + "\n"
        + json.dumps({"text": texts[3]})
        + "\r\n"
        + "\n"
        + json.dumps({"text": texts[4]})
        + "\n"
        + json.dumps({"text": texts[5]})
    )
    path.write_bytes(body.encode())
    return texts


def test_byte_ranges_read_every_line_once_wherever_the_boundaries_fall(tmp_path):
    path = tmp_path / "docs.jsonl"
    texts = _awkward_jsonl(path)
    size = path.stat().st_size
    assert _texts(path, [Piece(str(path), "id", size)])[0] == texts
    for shard_bytes in range(1, size + 2):  # every range size: boundaries inside lines, on "\r", on "\n"
        pieces = file_pieces(str(path), "id", size, shard_bytes)
        assert len(pieces) == (1 if shard_bytes > size else -(-size // shard_bytes))
        assert [p.span for p in pieces if p.span] == sorted(p.span for p in pieces if p.span)
        assert _texts(path, pieces)[0] == texts, shard_bytes


def test_a_bad_line_in_a_range_is_named_by_its_line_in_the_file(tmp_path):
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": f"document {i} " * (i % 5 + 1)}) for i in range(40)]
    lines[26] = '{"text": "unterminated'
    lines[33] = json.dumps({"body": "no text"})
    path.write_text("\n".join(lines) + "\n")
    size = path.stat().st_size
    pieces = file_pieces(str(path), "id", size, size // 6)
    assert len(pieces) >= 6
    errors = []
    for piece in pieces:
        try:
            list(read_texts(str(path), "text", ReadCounts(), span=piece.span))
        except BadRecordError as exc:
            errors.append(str(exc))
    assert len(errors) == 2, errors
    assert errors[0].startswith(f"{path}:line 27: not JSON"), errors
    assert errors[1].startswith(f"{path}:line 34: no field 'text'"), errors

    texts, skipped = _texts(path, pieces, skip_bad=True)
    assert skipped == 2 and len(texts) == 38
    assert texts == [json.loads(line)["text"] for n, line in enumerate(lines) if n not in (26, 33)]


def test_parquet_row_group_ranges_read_every_row_once_and_name_rows_in_the_file(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "docs.parquet"
    texts = [f"row {i} " * 30 for i in range(20)]
    column: list[str | None] = list(texts)
    column[13] = None
    pq.write_table(pa.table({"text": column}), path, row_group_size=3)
    size = path.stat().st_size
    pieces = file_pieces(str(path), "id", size, 1)
    assert [p.span for p in pieces] == [(g, g + 1) for g in range(7)]  # each row group holds >= 1 byte
    two = file_pieces(str(path), "id", size, size // 3)
    assert 1 < len(two) < 7 and two[0].span[0] == 0 and two[-1].span[1] == 7
    with pytest.raises(BadRecordError, match="docs.parquet:row 13: no field 'text'"):
        _texts(path, two)
    got, skipped = _texts(path, two, skip_bad=True)
    assert skipped == 1 and got == texts[:13] + texts[14:]


def test_compressed_files_and_small_files_are_not_split():
    assert file_pieces("/d/a.jsonl.gz", "id", 10**9, 1000) == [Piece("/d/a.jsonl.gz", "id", 10**9)]
    assert file_pieces("/d/a.jsonl", "id", 999, 1000) == [Piece("/d/a.jsonl", "id", 999)]
    assert file_pieces("/d/a.jsonl", "id", 10**9, 0) == [Piece("/d/a.jsonl", "id", 10**9)]


def _files(names: list[str], size: int = 100) -> list[list[Piece]]:
    return [[Piece(f"/d/{n}", f"sha256:{n}", size)] for n in names]


def test_groups_end_where_the_files_say_so_adding_a_file_changes_one_group():
    names = [f"f{i:04d}" for i in range(400)]
    before = group(_files(names), 2000)
    assert sum(len(g) for g in before) == 400
    assert [p.path for g in before for p in g] == [f"/d/{n}" for n in names]  # input order kept
    assert 10 <= len(before) <= 40 and max(len(g) for g in before) <= 40  # about 20 files a group, at most 2x
    assert min(len(g) for g in before[:-1]) >= 10  # a group holds at least half before it may end

    after = group(_files(names[:200] + ["new"] + names[200:]), 2000)
    changed = {tuple(p.path for p in g) for g in after} - {tuple(p.path for p in g) for g in before}
    assert 1 <= len(changed) <= 2 and any("/d/new" in g for g in changed), changed

    big = [
        [Piece("/d/big.jsonl", "sha256:big", 3000, (0, 1500))],
        [Piece("/d/big.jsonl", "sha256:big", 3000, (1500, 3000))],
    ]
    mixed = group(_files(names[:3]) + big + _files(names[3:6]), 2000)
    assert [len(g) for g in mixed] == [3, 1, 1, 3]  # a large file's ranges stand alone, between the groups
    assert group(_files(names[:5]), 0) == [[p] for [p] in _files(names[:5])]


def test_a_json_file_is_an_array_or_json_lines_as_levanter_tells_them(tmp_path):
    """Dolma's and Dolmino's shards are JSON lines named ``.json.gz``; a ``.json`` starting with ``[`` is an array."""
    import gzip

    from marinbuild.ml.corpus import iter_documents

    texts = ["one", "two", "three"]
    lines = tmp_path / "arxiv-0000.json.gz"
    lines.write_bytes(gzip.compress("".join(json.dumps({"text": t}) + "\n" for t in texts).encode()))
    array = tmp_path / "docs.json"
    array.write_text(json.dumps([{"text": t} for t in texts], indent=1))
    for path in (lines, array):
        assert list(read_texts(str(path), "text", ReadCounts())) == texts, path
        assert [d["text"] for d in iter_documents(str(path))] == texts, path
