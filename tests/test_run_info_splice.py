"""A run info spliced from an earlier file by the child process (``store/run_info_splice.py``): byte for byte the
file a full write makes, and nothing named when the write is abandoned, refused, or its build is killed.

The earlier file is written by ``store/run_info.write`` (checked against the standard library in
``test_run_info_stream.py``); the spliced one must equal what ``run_info.write`` makes of the final entries.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_run_info_stream import HEAD

from marinbuild.store import run_info, run_info_splice
from marinbuild.store.run_info_splice import CHUNK, SplicedRunInfo


def _entries(count: int, salt: str = "") -> list[bytes]:
    """Compact sorted JSON entries of very different sizes; together several of the child's chunks."""
    size = 3 * CHUNK // count
    return [
        json.dumps({"name": f"s{i}", "version": {"blob": "v" * (i * 7919 % size), "salt": salt, "i": i}}).encode()
        for i in range(count)
    ]


def _written(folder: Path, entries: list[bytes], head: dict[str, object] = HEAD) -> tuple[Path, list[tuple[int, int]]]:
    spans: list[tuple[int, int]] = []
    path = run_info.write(str(folder), "exp", head, [(e,) for e in entries], False, spans)
    return Path(path), spans


def _splice(folder: Path, source: Path, spans: list[tuple[int, int]], new: dict[int, bytes]) -> SplicedRunInfo:
    slots = [None if i in new else span for i, span in enumerate(spans)]
    return SplicedRunInfo(str(folder), "exp", run_info.opening(HEAD), str(source), slots)


def _files(folder: Path) -> list[str]:
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("changed", [[0], [5, 6, 200], [399], list(range(0, 400, 3))])
def test_a_spliced_run_info_is_what_a_full_write_of_its_entries_makes(tmp_path: Path, changed: list[int]) -> None:
    before, after = tmp_path / "before", tmp_path / "after"
    entries = _entries(400)
    source, spans = _written(before, entries)
    now = list(entries)
    new = {i: _entries(400, salt="edited")[i] for i in changed}
    for i, entry in new.items():
        now[i] = entry
    expected, expected_spans = _written(after, now)
    splice = _splice(before, source, spans, new)
    splice.add((new[i],) for i in sorted(new))
    splice.finish()
    path = Path(splice.result())
    assert path.name == expected.name
    assert path.read_bytes() == expected.read_bytes()
    assert splice.spans == expected_spans
    assert _files(before) == sorted([source.name, path.name])  # no temporary file left


def test_a_spliced_run_info_keeps_an_existing_file_of_its_name(tmp_path: Path) -> None:
    entries = _entries(50)
    source, spans = _written(tmp_path, entries)
    text = source.read_bytes()
    splice = _splice(tmp_path, source, spans, {7: entries[7]})  # the same entries: the same name
    splice.add([(entries[7],)])
    splice.finish()
    assert splice.result() == str(source)
    assert source.read_bytes() == text
    assert splice.spans == []  # the kept file's head is its own
    assert _files(tmp_path) == [source.name]


@pytest.mark.parametrize("added", [False, True], ids=["before-its-entries", "with-its-entries"])
def test_an_abandoned_splice_names_nothing(tmp_path: Path, added: bool) -> None:
    """A build abandons its run info before or after it sends the new entries (nothing to run, an error)."""
    source, spans = _written(tmp_path, _entries(50))
    splice = _splice(tmp_path, source, spans, {3: b'{"name": "x"}'})
    if added:
        splice.add([(b'{"name": "x"}',)])
    splice.abandon()
    assert _files(tmp_path) == [source.name]
    with pytest.raises(RuntimeError, match="abandoned"):
        splice.result()


def test_a_splice_is_named_only_with_all_its_new_entries(tmp_path: Path) -> None:
    entries = _entries(50)
    source, spans = _written(tmp_path, entries)
    splice = _splice(tmp_path, source, spans, {3: entries[3], 40: entries[40]})
    with pytest.raises(ValueError, match="not all added"):
        splice.finish()
    with pytest.raises(ValueError, match="more new run-info entries"):
        splice.add([(entries[3],), (entries[40],), (entries[41],)])
    splice.abandon()
    assert _files(tmp_path) == [source.name]


def test_an_earlier_file_not_laid_out_as_recorded_fails_the_write_and_names_nothing(tmp_path: Path) -> None:
    entries = _entries(50)
    source, spans = _written(tmp_path, entries)
    text = bytearray(source.read_bytes())
    at = spans[10][0] + spans[10][1]
    text[at : at + 6] = b";     "  # no separator between entries 10 and 11
    source.write_bytes(bytes(text))
    splice = _splice(tmp_path, source, spans, {30: entries[30]})
    splice.add([(entries[30],)])
    splice.finish()
    with pytest.raises(OSError, match="no entry separator"):
        splice.result()
    assert _files(tmp_path) == [source.name]


def test_a_build_killed_while_its_run_info_is_spliced_leaves_the_earlier_file_and_no_temporary(tmp_path: Path) -> None:
    entries = _entries(400)
    source, spans = _written(tmp_path, entries)
    text = source.read_bytes()
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from marinbuild.store import run_info
        from marinbuild.store.run_info_splice import SplicedRunInfo
        slots = [None if i == 200 else tuple(s) for i, s in enumerate({spans!r})]
        splice = SplicedRunInfo({str(tmp_path)!r}, "exp", run_info.opening({HEAD!r}), {str(source)!r}, slots)
        print(splice.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # a build killed before its steps start
        """
    )
    build = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert build.returncode == -signal.SIGKILL, build.stderr
    writer = int(build.stdout.split()[0])
    try:
        pidfd = os.pidfd_open(writer)
    except ProcessLookupError:
        pidfd = None  # it has already exited
    if pidfd is not None:
        try:
            assert select.select([pidfd], [], [], 60)[0], "the writer did not exit when its build died"
        finally:
            os.close(pidfd)
    assert _files(tmp_path) == [source.name]
    assert source.read_bytes() == text


def _spliced(folder: Path, source: Path, spans: list[tuple[int, int]], now: list[bytes], new: dict[int, bytes],
             md5_states: list[tuple[int, bytes]]) -> SplicedRunInfo:  # fmt: skip
    slots = [None if i in new else span for i, span in enumerate(spans)]
    splice = SplicedRunInfo(str(folder), "exp", run_info.opening(HEAD), str(source), slots, md5_states)
    splice.add((now[i],) for i in sorted(new))
    splice.finish()
    splice.result()
    return splice


@pytest.mark.parametrize("edits", [[[300], [390]], [[5], [399]], [[200], [100]], [[399], [0]]])
def test_a_splice_resumed_from_saved_md5_states_is_what_a_full_write_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: list[list[int]]
) -> None:
    """Each splice saves md5 states as it hashes; the next one resumes from the last state before its first new
    entry (the entries before it are the earlier file's) and still names and writes the file a full write makes."""
    monkeypatch.setattr(run_info_splice, "STATE_EVERY", 256 << 10)
    entries = _entries(400)
    source, spans = _written(tmp_path / "splices", entries)
    md5_states: list[tuple[int, bytes]] = []
    now = list(entries)
    for round_, changed in enumerate(edits):
        new = {i: _entries(400, salt=f"edit {round_}")[i] for i in changed}
        now = [new.get(i, entry) for i, entry in enumerate(now)]
        expected, expected_spans = _written(tmp_path / f"full-{round_}", now)
        splice = _spliced(tmp_path / "splices", source, spans, now, new, md5_states)
        path = Path(splice.result())
        assert path.name == expected.name
        assert path.read_bytes() == expected.read_bytes()
        assert splice.spans == expected_spans
        if round_:  # the first splice starts from a file written whole: no saved state
            assert splice.resumed_from == max((i for i, _state in md5_states if i <= min(changed)), default=0)
        assert len(splice.md5_states) >= 15  # about 6 MB of entries, a state every 256 KB
        source, spans, md5_states = path, splice.spans, splice.md5_states
    assert edits[-1][0] == 0 or splice.resumed_from > 0


def test_without_saved_states_a_splice_hashes_with_hashlib_and_saves_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_info_splice, "STATE_EVERY", 0)
    entries = _entries(100)
    source, spans = _written(tmp_path / "before", entries)
    now = [b'{"name": "x"}' if i == 50 else entry for i, entry in enumerate(entries)]
    expected, _spans = _written(tmp_path / "full", now)
    splice = _spliced(tmp_path / "before", source, spans, now, {50: now[50]}, [])
    assert Path(splice.result()).read_bytes() == expected.read_bytes()
    assert Path(splice.result()).name == expected.name
    assert splice.md5_states == [] and splice.resumed_from == 0


def test_a_kept_file_of_the_same_name_keeps_the_saved_states(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entries of an existing file of the same name are the same, and so are the md5 states over them."""
    monkeypatch.setattr(run_info_splice, "STATE_EVERY", 64 << 10)
    entries = _entries(100)
    source, spans = _written(tmp_path, entries)
    first = _spliced(tmp_path, source, spans, entries, {60: entries[60]}, [])
    assert first.result() == str(source)
    again = _spliced(tmp_path, source, spans, entries, {80: entries[80]}, first.md5_states)
    assert again.result() == str(source) and again.resumed_from > 0
    assert again.md5_states == first.md5_states


def test_a_splice_resumes_from_the_states_a_whole_write_or_a_lookup_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread writer of a full build and ``find_local`` (a no-op finding its graph's file) save the states too."""
    monkeypatch.setattr(run_info_splice, "STATE_EVERY", 256 << 10)
    entries = _entries(400)
    states: list[tuple[int, bytes]] = []
    spans: list[tuple[int, int]] = []
    source = Path(run_info.write(str(tmp_path / "a"), "exp", HEAD, [(e,) for e in entries], False, spans, states))
    found = run_info.find_local(str(tmp_path / "a"), "exp", [(e,) for e in entries])
    assert found is not None and found[0] == str(source) and found[1] == spans
    assert found[2] == states and len(states) >= 15
    now = [b'{"name": "x"}' if i == 333 else entry for i, entry in enumerate(entries)]
    expected, _spans = _written(tmp_path / "full", now)
    splice = _spliced(tmp_path / "a", source, spans, now, {333: now[333]}, states)
    assert splice.resumed_from == max(i for i, _state in states if i <= 333)
    assert Path(splice.result()).name == expected.name
    assert Path(splice.result()).read_bytes() == expected.read_bytes()
