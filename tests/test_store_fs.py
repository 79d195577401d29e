"""Local writes of ``marinbuild.store.fs``: atomic replacement, joins."""

from __future__ import annotations

import os
import stat

import pytest

from marinbuild.store import fs


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "run.json"
    fs.write_atomic_pieces(str(target), [b"{", b"}"])
    fs.write_atomic_pieces(str(target), iter([b"new ", b"content"]))
    assert target.read_bytes() == b"new content"
    assert os.listdir(target.parent) == ["run.json"]
    assert stat.S_IMODE(target.stat().st_mode) == fs.FILE_MODE & ~_umask()


def test_a_failed_atomic_write_keeps_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "run.json"
    target.write_bytes(b"old")

    def pieces():
        yield b"half of it"
        raise RuntimeError("disk trouble")

    with pytest.raises(RuntimeError, match="disk trouble"):
        fs.write_atomic_pieces(str(target), pieces())
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["run.json"]


def test_status_writes_create_and_replace_whole(tmp_path):
    from marinbuild.store import status as st

    folder = str(tmp_path / "deeper")
    st.write_status(folder, st.STATUS_RUNNING)
    st.write_status(folder, st.STATUS_FAILED)  # shorter than RUNNING: nothing of it is left
    assert open(st.status_path(folder), "rb").read() == b"FAILED"
    assert os.listdir(folder) == [".executor_status"]


@pytest.mark.parametrize(
    "base, names",
    [
        ("/a/b", ("c",)),
        ("/a/b/", ("c",)),
        ("/a/b", ("/abs",)),
        ("", ("c",)),
        ("rel", ("c", "d")),
        ("file:///a", ("c",)),
    ],
)
def test_local_join_is_os_path_join(base, names):
    assert fs.join(base, *names) == os.path.join(base, *names)


def test_remote_join_uses_slashes():
    assert fs.join("gs://bucket/prefix/", "a", "b") == "gs://bucket/prefix/a/b"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
