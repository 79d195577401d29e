"""Frozen values, glob(), workspaces, private files and source-file hashing."""

from __future__ import annotations

import json
import os
import pickle
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import xxhash

from marinbuild.load import (
    BuildFileError,
    FrozenDict,
    FrozenValueError,
    Loader,
    StatCache,
    Workspace,
    WorkspaceError,
    find_workspace,
    hash_source_file,
)
from marinbuild.load.frozen import thaw
from marinbuild.load.glob import GlobPatternError, compile_glob, glob_files, list_package_files

WriteWorkspace = Callable[..., Workspace]

# --- frozen values ---------------------------------------------------------------------------


def test_frozen_dict_behaves_like_a_dict_but_cannot_change() -> None:
    d = FrozenDict({"a": 1, "b": FrozenDict({"c": 2})})
    assert d == {"a": 1, "b": {"c": 2}} and d | {"z": 0} == {"a": 1, "b": {"c": 2}, "z": 0}
    assert type(d | {"z": 0}) is dict and dict(d) == d
    for mutate in (
        lambda: d.__setitem__("x", 1),
        lambda: d.__delitem__("a"),
        lambda: d.update(x=1),
        lambda: d.pop("a"),
        lambda: d.popitem(),
        lambda: d.setdefault("x", 1),
        lambda: d.clear(),
        lambda: d.__ior__({"x": 1}),
        lambda: d["b"].__setitem__("c", 3),
    ):
        with pytest.raises(FrozenValueError, match="frozen dict.*dict\\(value\\)"):
            mutate()
    copy = pickle.loads(pickle.dumps(d))
    assert copy == d and isinstance(copy, FrozenDict)
    thawed = thaw(d)
    assert type(thawed) is dict and type(thawed["b"]) is dict


def test_values_loaded_from_a_file_are_frozen_but_copies_are_not(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "lib/x.star": "ITEMS = [1, 2]\nCFG = {'k': [1]}\n",
            "a/BUILD.marin": """
load("//lib:x.star", "ITEMS", "CFG")
mine = list(ITEMS)
mine.append(3)
more = ITEMS + [4]
more.append(5)
d = dict(CFG)
d["j"] = 2
fail("ok", mine, more, sorted(d))
""",
        }
    )
    with pytest.raises(BuildFileError, match=r"fail: ok \[1, 2, 3\] \[1, 2, 4, 5\] \[\"j\", \"k\"\]"):
        Loader(ws).load_all()


def test_build_file_values_given_to_rules_are_copied(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "a/BUILD.marin": 'load("//rules:test.py", "train")\n'
            'tags = ["a"]\ntrain(name = "x", tags = tags)\ntags.append("b")\n'
        }
    )
    assert Loader(ws).load_all()["//a:x"].attrs["tags"] == ("a",)


# --- glob ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "matches", "misses"),
    [
        ("*.txt", ["a.txt"], ["d/a.txt", ".h.txt", "a.txtx"]),
        ("data/*.jsonl", ["data/a.jsonl"], ["data/x/a.jsonl", "a.jsonl"]),
        ("**/*.py", ["a.py", "x/a.py", "x/y/a.py"], [".x/a.py", "x/.a.py", "a.pyc"]),
        ("data/**", ["data/a", "data/x/y"], ["data", "other/a", "data/.h"]),
        ("**", ["a", "x/y"], [".a", "x/.y"]),
        ("?.txt", ["a.txt"], ["ab.txt"]),
        ("[ab].txt", ["a.txt", "b.txt"], ["c.txt"]),
        ("[!ab].txt", ["c.txt"], ["a.txt"]),
        (".*", [".hidden"], ["visible"]),
        ("x+y(1).txt", ["x+y(1).txt"], ["xxy(1).txt"]),
    ],
)
def test_glob_patterns(pattern: str, matches: list[str], misses: list[str]) -> None:
    regex = compile_glob(pattern)
    for path in matches:
        assert regex.match(path), path
    for path in misses:
        assert not regex.match(path), path


@pytest.mark.parametrize("pattern", ["", "/abs", "../x", "a/../b", "a//b", "a**b/c", "a\\b", "./x"])
def test_glob_bad_patterns(pattern: str) -> None:
    with pytest.raises(GlobPatternError):
        compile_glob(pattern)


def test_list_package_files_skips_subpackages_and_hidden(tmp_path: Path) -> None:
    for rel in [
        "BUILD.marin",
        "a.txt",
        "data/b.jsonl",
        "data/deep/c.jsonl",
        "sub/BUILD.marin",
        "sub/x.txt",
        ".git/config",
        ".hidden",
        "node_modules/m.js",
        "__pycache__/m.pyc",
    ]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    files = list_package_files(tmp_path)
    assert files == [".hidden", "a.txt", "data/b.jsonl", "data/deep/c.jsonl"]
    assert glob_files(files, ["**/*.jsonl", "*.txt"], exclude=["data/deep/**"]) == ["a.txt", "data/b.jsonl"]


def test_glob_in_build_file(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "p/data/b.jsonl": "",
            "p/data/a.jsonl": "",
            "p/data/skip.jsonl": "",
            "p/sub/BUILD.marin": "",
            "p/sub/c.jsonl": "",
            "p/BUILD.marin": 'load("//rules:test.py", "tokenize")\n'
            'tokenize(name = "t", srcs = glob(["**/*.jsonl"], exclude = ["data/skip.jsonl"]))\n'
            'tokenize(name = "none", srcs = glob(["*.csv"], allow_empty = True))\n',
        }
    )
    loaded = Loader(ws).load_all()
    assert [label.name for label in loaded["//p:t"].srcs] == ["data/a.jsonl", "data/b.jsonl"]
    assert loaded["//p:none"].srcs == ()


# --- workspaces --------------------------------------------------------------------------------


def test_find_workspace_walks_up_to_the_marinbuild_table(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.marinbuild]\nignore_dirs = ["big/data"]\n')
    inner = tmp_path / "sub"
    inner.mkdir()
    (inner / "pyproject.toml").write_text("[project]\nname = 'not-a-workspace'\n")
    deep = inner / "x" / "y"
    deep.mkdir(parents=True)
    ws = find_workspace(deep)
    assert ws.root == tmp_path.resolve() and ws.config == {"ignore_dirs": ["big/data"]}
    (deep / "f.txt").write_text("")
    assert find_workspace(deep / "f.txt").root == tmp_path.resolve()
    assert ws.stat_cache_path == tmp_path.resolve() / ".marinbuild" / "stat_cache.json"


def test_find_workspace_errors(tmp_path: Path) -> None:
    with pytest.raises(WorkspaceError, match=r"\[tool.marinbuild\]"):
        find_workspace(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.marinbuild\n")
    with pytest.raises(WorkspaceError, match="invalid TOML"):
        find_workspace(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool]\nmarinbuild = 3\n")
    with pytest.raises(WorkspaceError, match="must be a table"):
        find_workspace(tmp_path)
    with pytest.raises(WorkspaceError, match="ignore_dirs"):
        Workspace(tmp_path, {"ignore_dirs": "x"})


def test_workspace_packages(tmp_path: Path) -> None:
    for rel in [
        "BUILD.marin",
        "a/BUILD.marin",
        "a/b/BUILD.marin",
        "a/nobuild/x.txt",
        "c/BUILD.marin",
        ".hidden/BUILD.marin",
        ".venv/lib/BUILD.marin",
        "node_modules/x/BUILD.marin",
        "__pycache__/BUILD.marin",
        "big/data/BUILD.marin",
        "big/BUILD.marin",
    ]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    ws = Workspace(tmp_path, {"ignore_dirs": ["big/data"]})
    assert ws.packages() == ["", "a", "a/b", "big", "c"]
    assert ws.packages("a") == ["a", "a/b"]
    assert ws.packages("nope") == []
    assert ws.is_package("a/b") and not ws.is_package("a/nobuild") and not ws.is_package(".venv/lib")
    assert not ws.is_package("big/data")
    assert ws.display(tmp_path / "a" / "BUILD.marin") == "a/BUILD.marin"
    assert ws.display("/elsewhere/x") == "/elsewhere/x"


def test_workspace_packages_walk_as_os_walk_does(tmp_path: Path) -> None:
    """Symbolic links to folders are not entered (os.walk's default); a linked BUILD file counts."""
    outside = tmp_path / "outside"
    for rel in ["ws/a/BUILD.marin", "ws/a/deep/er/BUILD.marin", "outside/BUILD.marin", "outside/in/BUILD.marin"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    root = tmp_path / "ws"
    (root / "linked").symlink_to(outside, target_is_directory=True)
    (root / "b").mkdir()
    (root / "b" / "BUILD.marin").symlink_to(outside / "BUILD.marin")
    (root / "c").mkdir()
    (root / "c" / "BUILD.marin").symlink_to(tmp_path / "missing")  # broken: listed by os.walk too
    ws = Workspace(root, {})
    expected = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if "BUILD.marin" in filenames:
            rel = os.path.relpath(dirpath, root)
            expected.append("" if rel == "." else rel.replace(os.sep, "/"))
    assert ws.packages() == sorted(expected) == ["a", "a/deep/er", "b", "c"]
    assert ws.packages("a") == ["a", "a/deep/er"]
    assert ws.is_package("linked/in")  # reachable by a label, though //... does not list it
    assert not ws.is_package("c")  # a broken link is no BUILD file


def _age(path: Path) -> None:
    old = time.time() - 60
    os.utime(path, (old, old))


# --- source-file hashing -------------------------------------------------------------------------


def test_hash_source_file_uses_the_stat_cache(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_bytes(b'{"a": 1}\n' * 1000)
    _age(data)
    cache_path = tmp_path / ".marinbuild" / "stat_cache.json"
    cache = StatCache(cache_path)
    digest = hash_source_file(data, cache)
    assert digest == xxhash.xxh3_128_hexdigest(data.read_bytes())
    cache.save()
    assert json.loads(cache_path.read_text())["entries"][str(data)][3] == digest

    reloaded = StatCache(cache_path)
    # Rewritten in place with other bytes of the same size, its times put back: the stat is unchanged, so the
    # cached digest is the answer, which shows the file was not read again.
    stat = data.stat()
    with open(data, "r+b") as f:
        f.write(b'{"b": 2}\n')
    os.utime(data, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert data.stat().st_ino == stat.st_ino and data.stat().st_size == stat.st_size
    assert hash_source_file(data, reloaded) == digest != xxhash.xxh3_128_hexdigest(data.read_bytes())

    data.write_bytes(b"changed\n")
    _age(data)
    assert hash_source_file(data, reloaded) == xxhash.xxh3_128_hexdigest(b"changed\n")
    assert reloaded.dirty


def test_hash_source_file_without_cache_and_racy_files(tmp_path: Path) -> None:
    data = tmp_path / "f.bin"
    data.write_bytes(b"\x00" * (3 << 20))
    assert hash_source_file(data) == xxhash.xxh3_128_hexdigest(data.read_bytes())
    cache = StatCache()
    hash_source_file(data, cache)  # modified just now: hashed, not remembered
    assert cache.entries == {} and not cache.dirty
    cache.save()  # no path: nothing to do


def test_stat_cache_ignores_corrupt_files(tmp_path: Path) -> None:
    path = tmp_path / "stat_cache.json"
    path.write_text("{not json")
    assert StatCache(path).entries == {}
    path.write_text(json.dumps({"version": 999, "entries": {"x": [1, 2, 3, "d"]}}))
    assert StatCache(path).entries == {}


def test_workspaces_are_hashable(tmp_path: Path) -> None:
    assert hash(Workspace(tmp_path, {"a": [1]})) == hash(Workspace(tmp_path, {}))
