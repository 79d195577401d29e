"""The compile helper (``marinbuild.load.prefetch``): a forked child compiling BUILD files during a load.

Whether the child or the loader compiles a given file depends on timing, so these tests also
make the loader wait until the child has compiled everything: then every file comes from it.
"""

from __future__ import annotations

import marshal
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from marinbuild.load import BuildFileError, LoadedWorkspace, Loader, Workspace, codecache, find_workspace, prefetch
from marinbuild.load.codecache import clear_memory_cache
from marinbuild.load.dialect import CompiledFile, compile_source

WriteWorkspace = Callable[..., Workspace]

_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or _CORES < 2, reason="no fork, or a single core")


@pytest.fixture
def forkable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork even if an earlier test left a thread behind (the fsspec IO thread of the GCS tests, idle):
    the child only compiles."""
    monkeypatch.setattr(prefetch, "can_fork", lambda: True)


def _packages(count: int, broken: dict[int, str] | None = None) -> dict[str, str]:
    files = {}
    for p in range(count):
        lines = ['load("//rules:test.py", "tokenize", "train")', ""]
        for i in range(20):
            dep = f', deps = ["//p{p - 1}:t{i}"]' if p else ""
            lines.append(f'train(name = "t{i}", steps = {p * 100 + i}, extra = {{"i": {i}}}{dep})')
        files[f"p{p}/BUILD.marin"] = "\n".join(lines) + "\n" + (broken or {}).get(p, "")
    return files


@pytest.fixture
def always(monkeypatch: pytest.MonkeyPatch, forkable: None) -> list[str]:
    """A helper for every load of 2 files or more, whose child has compiled all it can before the loader asks;
    the paths the loader got from the child are listed in the returned list."""
    monkeypatch.setattr(prefetch, "MIN_BYTES", 0)
    monkeypatch.setattr(prefetch, "MIN_FILES", 2)
    taken: list[str] = []
    original = prefetch.CompileHelper.take

    def patient_take(self: prefetch.CompileHelper, path: str, stamp: tuple[int, int]) -> bytes | CompiledFile | None:
        _wait_for_the_end(self)
        blob = original(self, path, stamp)
        if blob is not None:
            taken.append(path)
        return blob

    monkeypatch.setattr(prefetch.CompileHelper, "take", patient_take)
    clear_memory_cache()
    return taken


def _wait_for_the_end(helper: prefetch.CompileHelper) -> None:
    """Wait until the child has compiled all it could and exited."""
    while not helper.eof:
        helper._readable(1.0)
        helper._drain()


def _load(ws_root: Path) -> LoadedWorkspace:
    clear_memory_cache()
    return Loader(find_workspace(ws_root), disk_cache=False).load_all()


def _summary(loaded: LoadedWorkspace) -> list[tuple[str, str, dict[str, Any], tuple[str, ...]]]:
    return [
        (str(label), str(t.location), dict(t.attrs), tuple(map(str, t.deps))) for label, t in loaded.targets.items()
    ]


def test_targets_from_the_helper_are_the_same(
    make_ws: WriteWorkspace, always: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_ws(_packages(12))
    with_helper = _summary(_load(ws.root))
    assert len(always) == 12  # every BUILD file came from the child
    monkeypatch.setattr(prefetch, "can_fork", lambda: False)
    always.clear()
    assert _summary(_load(ws.root)) == with_helper
    assert always == []


@pytest.mark.parametrize(
    "broken",
    [
        "train(name = 'bad', stepz = 3)\n",  # an error while running the file: a located rule-call error
        "train(name = 'bad', steps = 'x')\n",
        "import os\n",  # rejected by the dialect check, in the child as in the loader
        "train(name = 'bad',\n",  # a syntax error
        "def f():\n    while True:\n        pass\n",
    ],
)
def test_errors_are_the_same_with_the_helper(
    make_ws: WriteWorkspace, always: list[str], monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    ws = make_ws(_packages(6, {4: broken}))
    with pytest.raises(BuildFileError) as with_helper:
        _load(ws.root)
    assert len(always) >= 5
    monkeypatch.setattr(prefetch, "can_fork", lambda: False)
    with pytest.raises(BuildFileError) as without:
        _load(ws.root)
    assert str(with_helper.value) == str(without.value)
    assert (with_helper.value.path, with_helper.value.line, with_helper.value.col) == (
        without.value.path,
        without.value.line,
        without.value.col,
    )
    assert with_helper.value.path == "p4/BUILD.marin"


def test_helper_results_and_changed_files(tmp_path: Path, forkable: None) -> None:
    files = []
    for i in range(5):
        path = tmp_path / f"f{i}.marin"
        path.write_text(f'x = {{"i": {i}}}\ny = [x["i"]] * 3\n')
        files.append((str(path), f"f{i}.marin"))
    (tmp_path / "bad.marin").write_text("x = (\n")
    files.append((str(tmp_path / "bad.marin"), "bad.marin"))
    helper = prefetch.CompileHelper.start(files)
    assert helper is not None
    try:
        _wait_for_the_end(helper)
        for path, display in files[:4]:
            st = os.stat(path)
            blob = helper.take(path, (st.st_mtime_ns, st.st_size))
            assert blob is not None
            code, loads = marshal.loads(blob)
            assert code.co_code == compile_source(Path(path).read_bytes(), path, display).code.co_code
            assert code.co_filename == path and loads == ()
        changed = files[4][0]
        Path(changed).write_text("x = 1000\n")  # not what the child compiled: the loader must compile it itself
        st = os.stat(changed)
        assert helper.take(changed, (st.st_mtime_ns, st.st_size)) is None
        bad = files[5][0]  # the child could not compile it: the loader does, and reports the error
        st = os.stat(bad)
        assert helper.take(bad, (st.st_mtime_ns, st.st_size)) is None
        assert helper.take(str(tmp_path / "unknown.marin"), (0, 0)) is None
    finally:
        helper.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(helper.pid, 0)  # reaped
    assert helper.take(files[0][0], (0, 0)) is None


def test_no_helper_while_another_thread_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(prefetch.SWITCH, raising=False)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    alone = prefetch._threads() == 1 and cores >= 2
    assert prefetch.can_fork() == alone
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert not prefetch.can_fork()
        assert prefetch.CompileHelper.start([("a", "a"), ("b", "b")]) is None
    finally:
        stop.set()
        thread.join()
    assert prefetch.can_fork() == alone


def test_no_helper_while_a_thread_unknown_to_threading_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread started below ``threading`` (as Ray's, gRPC's and JAX's native threads are) also forbids the fork."""
    import _thread

    monkeypatch.delenv(prefetch.SWITCH, raising=False)
    started, stop = threading.Event(), threading.Event()

    def native() -> None:
        started.set()
        stop.wait()

    python_threads = threading.active_count()
    _thread.start_new_thread(native, ())
    started.wait()
    try:
        assert threading.active_count() == python_threads  # invisible to threading
        assert not prefetch.can_fork()
        assert prefetch.CompileHelper.start([("a", "a"), ("b", "b")]) is None
    finally:
        stop.set()


def test_helper_results_go_to_the_disk_cache(
    make_ws: WriteWorkspace, always: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_ws(_packages(5))
    old = 1_600_000_000
    for path in ws.root.rglob("*.marin"):
        os.utime(path, (old, old))  # older than two seconds: cacheable on disk
    clear_memory_cache()
    first = _summary(Loader(ws, disk_cache=True).load_all())
    assert len(always) == 5
    clear_memory_cache()

    def no_compiling(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("compiled again")

    monkeypatch.setattr(codecache, "compile_source", no_compiling)
    always.clear()
    assert _summary(Loader(ws, disk_cache=True).load_all()) == first  # all from the pack file
    assert always == []


def _played_helper(tmp_path: Path) -> tuple[prefetch.CompileHelper, list[tuple[str, str]], int]:
    """A helper whose child is played by the test (no fork), on f0..f5 (f4 has a syntax error): the child
    is on f0. Returns the helper, the files and the pipe's end to write the child's answers to."""
    files = []
    for i in range(6):
        path = tmp_path / f"f{i}.marin"
        path.write_text(f"x = [{i}] * 3\n" if i != 4 else "x = (\n")  # f4: an error, left for its turn
        files.append((str(path), f"f{i}.marin"))
    helper = prefetch.CompileHelper(files)
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    helper.fd, helper.claims, helper.started = read_fd, mmap.mmap(-1, len(files)), time.perf_counter()
    helper.claims[0] = 2
    return helper, files, write_fd


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size


def test_loader_compiles_later_files_while_the_child_is_busy(tmp_path: Path) -> None:
    """While the child is on the file the loader needs (and has sent nothing yet, so it may well be slow), the
    loader compiles the last files nobody has taken, then waits for the child's answer."""
    helper, files, write_fd = _played_helper(tmp_path)
    helper.started -= 30.0  # forked 30 s ago: the loader waits that long for f0 once it has taken all else

    def child() -> None:  # answers once every other file is taken
        while any(helper.claims[j] != 1 for j in range(1, len(files))):  # type: ignore[index]
            time.sleep(0.001)
        os.write(write_fd, prefetch._record(0, *files[0]))

    thread = threading.Thread(target=child)
    thread.start()
    try:
        blob = helper.take(files[0][0], _stamp(files[0][0]))
        assert isinstance(blob, bytes)
        assert marshal.loads(blob)[0].co_filename == files[0][0]
        for j in (1, 2, 3, 5):
            own = helper.take(files[j][0], _stamp(files[j][0]))
            assert isinstance(own, CompiledFile)
            assert own.display == files[j][1] and own.code.co_filename == files[j][0]
        assert helper.take(files[4][0], _stamp(files[4][0])) is None  # its error is the caller's to report
    finally:
        thread.join()
        os.close(write_fd)
        os.close(helper.fd)


def test_a_stalled_child_does_not_stall_the_loader(tmp_path: Path) -> None:
    """A child that never answers: the loader waits no longer than the child took per file, between files it
    compiles itself, then compiles the child's file too."""
    helper, files, write_fd = _played_helper(tmp_path)
    helper.sent, helper.started = 1, time.perf_counter() - 0.01  # it sent a file 10 ms after it started
    helper.busy, helper.asked = 1.0, 1  # the loader has a second of other work per file: it waits first
    try:
        assert helper.take(files[0][0], _stamp(files[0][0])) is None
        assert all(helper.claims[j] == 1 for j in range(len(files)))  # type: ignore[index]
        assert isinstance(helper.take(files[5][0], _stamp(files[5][0])), CompiledFile)
    finally:
        os.close(write_fd)
        os.close(helper.fd)


def test_loader_helps_only_while_the_child_has_more_left_than_it() -> None:
    helper = prefetch.CompileHelper([(f"f{i}", f"f{i}") for i in range(10)])
    helper.claims = mmap.mmap(-1, 10)
    assert helper._behind(0)  # no pace known yet: help
    helper.claims[0] = helper.claims[1] = 2  # the child sent f0 and is on f1: 8 files free after f1
    helper.sent = 1
    helper.started = time.perf_counter() - 1.0  # the child's pace: about a second a file, or slower
    helper.busy, helper.asked = 0.5, 1  # half a second of other work per file
    assert helper._behind(1)  # 8 files x 1 s of compiling left against 8 x 0.5 s of other work: help
    for j in range(2, 8):
        helper.claims[j] = 1
    helper.started = time.perf_counter() - 1.0
    assert not helper._behind(1)  # 2 x 1 s (and a little) against 8 x 0.5 s: wait for f1


def test_the_helper_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(prefetch.SWITCH, "0")
    assert not prefetch.can_fork()
    assert prefetch.CompileHelper.start([("a", "a"), ("b", "b")]) is None
