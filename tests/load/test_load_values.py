"""Frozen values, glob(), workspaces, the compiled-file cache and source-file hashing."""

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
    FrozenList,
    FrozenValueError,
    Loader,
    StatCache,
    Workspace,
    WorkspaceError,
    codecache,
    dialect,
    find_workspace,
    hash_source_file,
)
from marinbuild.load.frozen import freeze, freeze_function, thaw
from marinbuild.load.glob import GlobPatternError, compile_glob, glob_files, list_package_files

WriteWorkspace = Callable[..., Workspace]

# --- frozen values ---------------------------------------------------------------------------


def test_frozen_list_behaves_like_a_list_but_cannot_change() -> None:
    xs = freeze([1, [2, 3], {"a": [4]}])
    assert isinstance(xs, FrozenList) and isinstance(xs[1], FrozenList) and isinstance(xs[2], FrozenDict)
    assert xs == [1, [2, 3], {"a": [4]}]
    assert xs + [5] == [1, [2, 3], {"a": [4]}, 5] and type(xs + [5]) is list
    assert list(xs) == xs and type(list(xs)) is list and xs[1:] == [[2, 3], {"a": [4]}]
    assert json.dumps(xs) == '[1, [2, 3], {"a": [4]}]'
    assert hash(freeze([1, 2])) == hash(freeze([1, 2]))
    for mutate in (
        lambda: xs.append(1),
        lambda: xs.extend([1]),
        lambda: xs.insert(0, 1),
        lambda: xs.pop(),
        lambda: xs.remove(1),
        lambda: xs.clear(),
        lambda: xs.sort(),
        lambda: xs.reverse(),
        lambda: xs.__setitem__(0, 1),
        lambda: xs.__delitem__(0),
        lambda: xs.__iadd__([1]),
        lambda: xs.__imul__(2),
        lambda: xs[1].append(9),
        lambda: xs[2]["a"].append(9),
    ):
        with pytest.raises(FrozenValueError, match="frozen list.*list\\(value\\)"):
            mutate()
    assert xs == [1, [2, 3], {"a": [4]}]


def test_frozen_dict_behaves_like_a_dict_but_cannot_change() -> None:
    d = freeze({"a": 1, "b": {"c": 2}})
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


def test_freeze_and_thaw_round_trip_and_pickle() -> None:
    value = {"a": [1, (2, [3])], "s": {4}}
    frozen = freeze(value)
    assert frozen["s"] == frozenset({4}) and isinstance(frozen["a"][1][1], FrozenList)
    assert freeze(frozen) is frozen
    thawed = thaw(frozen)
    assert type(thawed) is dict and type(thawed["a"]) is list and thawed["a"][1][1] == [3]
    copy = pickle.loads(pickle.dumps(frozen))
    assert copy == frozen and isinstance(copy, FrozenDict) and isinstance(copy["a"], FrozenList)


def test_freeze_function_defaults() -> None:
    def f(x=[], *, y={}):  # noqa: B006 - the point of the test
        return x, y

    freeze_function(f)
    x, y = f()
    assert isinstance(x, FrozenList) and isinstance(y, FrozenDict)


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
    with pytest.raises(BuildFileError, match=r"fail: ok \[1, 2, 3\] \[1, 2, 4, 5\] \['j', 'k'\]"):
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


# --- compiled-file cache ------------------------------------------------------------------------


def _age(path: Path) -> None:
    old = time.time() - 60
    os.utime(path, (old, old))


def _no_compiling(*args: object, **kwargs: object) -> None:
    raise AssertionError("should have come from the disk cache")


def test_compiled_files_are_cached_in_memory_and_on_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "BUILD.marin"
    src.write_text('load("//x:y.star", "a", b = "c")\nz = 1\n')
    _age(src)
    cache = tmp_path / "cache"
    first = codecache.compile_file(src, "BUILD.marin", cache)
    assert codecache.compile_file(src, "BUILD.marin", cache) is first
    assert not cache.exists()  # written by flush(), in one file for the whole folder
    codecache.flush()
    assert [p.name for p in cache.glob("*.bin")] == [codecache.PACK_NAME]
    assert (cache / ".gitignore").read_text() == "*\n"

    codecache.clear_memory_cache()  # as in a new process
    monkeypatch.setattr(codecache, "compile_source", _no_compiling)
    again = codecache.compile_file(src, "BUILD.marin", cache)
    assert again.loads == first.loads and again.loads[0].symbols == (("a", "a"), ("b", "c"))
    scope: dict[str, object] = {"load": lambda *a, **k: None}
    exec(again.code, scope)
    assert scope["z"] == 1

    monkeypatch.setattr(codecache, "compile_source", dialect.compile_source)
    src.write_text("z = 22\n")  # new size and mtime: recompiled
    scope = {}
    exec(codecache.compile_file(src, "BUILD.marin", cache).code, scope)
    assert scope["z"] == 22


def test_the_pack_merges_what_other_processes_wrote_and_drops_stale_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    files = []
    for name in ("a", "b", "c"):
        src = tmp_path / name / "BUILD.marin"
        src.parent.mkdir()
        src.write_text(f"{name} = 1\n")
        _age(src)
        files.append(src)
    a, b, c = files
    codecache.compile_file(a, "a/BUILD.marin", cache)
    codecache.compile_file(b, "b/BUILD.marin", cache)
    codecache.flush()
    codecache.clear_memory_cache()  # another process: it compiles c, while b is deleted
    b.unlink()
    codecache.compile_file(c, "c/BUILD.marin", cache)
    codecache.flush()
    monkeypatch.setattr(codecache, "compile_source", _no_compiling)
    codecache.clear_memory_cache()
    for src, name in ((a, "a"), (c, "c")):
        scope: dict[str, object] = {}
        exec(codecache.compile_file(src, f"{name}/BUILD.marin", cache).code, scope)
        assert scope[name] == 1
    pack = codecache._read_pack(str(cache / codecache.PACK_NAME))
    assert sorted(pack) == sorted([str(a), str(c)])  # b's entry went with b


def test_a_pack_written_meanwhile_by_another_process_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    a, b = tmp_path / "a.marin", tmp_path / "b.marin"
    for src in (a, b):
        src.write_text("x = 1\n")
        _age(src)
    codecache.compile_file(a, "a.marin", cache)
    codecache.flush()
    held = codecache._PACKS.copy()  # this process keeps its view of the pack...
    codecache.clear_memory_cache()
    codecache.compile_file(b, "b.marin", cache)  # ...while "another" one adds b
    codecache.flush()
    codecache.clear_memory_cache()
    codecache._PACKS.update(held)
    monkeypatch.setattr(codecache, "compile_source", _no_compiling)
    assert codecache.compile_file(b, "b.marin", cache).path == str(b)


def test_a_damaged_pack_is_ignored_and_replaced(tmp_path: Path) -> None:
    src = tmp_path / "BUILD.marin"
    src.write_text("z = 1\n")
    _age(src)
    cache = tmp_path / "cache"
    cache.mkdir()
    for junk in (b"", b"not marshal", __import__("marshal").dumps((codecache._TAG, {"x": 1}))):
        (cache / codecache.PACK_NAME).write_bytes(junk)
        codecache.clear_memory_cache()
        assert codecache.compile_file(src, "BUILD.marin", cache).path == str(src)
        codecache.flush()
        assert list(codecache._read_pack(str(cache / codecache.PACK_NAME))) == [str(src)]


def test_private_files_are_written_whole_or_not_at_all(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    target = folder / "x.bin"
    assert codecache.write_private_file(target, b"abc") and target.read_bytes() == b"abc"
    assert (folder / ".gitignore").read_text() == "*\n"
    assert codecache.write_private_file(target, b"d" * 300_000) and target.read_bytes() == b"d" * 300_000
    (folder / "taken.bin").mkdir()
    assert not codecache.write_private_file(folder / "taken.bin", b"abc")  # cannot replace a folder
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert not codecache.write_private_file(blocker / "x.bin", b"abc")  # cannot make the folder
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "taken.bin", "x.bin"]  # no temporary left


def test_call_sites_find_lines_as_frames_do() -> None:
    import sys

    from marinbuild.load import context

    seen: list[tuple[object, int, int]] = []

    def record(*args: object) -> None:
        frame = sys._getframe(1)
        seen.append((frame.f_code, frame.f_lasti, frame.f_lineno))

    source = "x = [\n  record(1),\n  record(\n    2)]\nfor i in range(2):\n    record(i)\nrecord(record(3))\n"
    exec(compile(source, "calls.marin", "exec"), {"record": record})
    assert [line for _code, _lasti, line in seen] == [2, 3, 6, 6, 7, 7]
    for code, lasti, line in seen:
        assert context._line_of(code, lasti) == line  # type: ignore[arg-type]
        assert context.site_location(("calls.marin", code, lasti)).line == line  # type: ignore[arg-type]


def test_recently_changed_files_are_not_written_to_disk(tmp_path: Path) -> None:
    src = tmp_path / "BUILD.marin"
    src.write_text("z = 1\n")
    codecache.compile_file(src, "BUILD.marin", tmp_path / "cache")
    codecache.flush()
    assert not list((tmp_path / "cache").glob("*.bin"))


def test_broken_files_are_not_cached(tmp_path: Path) -> None:
    src = tmp_path / "BUILD.marin"
    src.write_text("import os\n")
    _age(src)
    for _ in range(2):
        with pytest.raises(BuildFileError, match="import"):
            codecache.compile_file(src, "BUILD.marin", tmp_path / "cache")
    codecache.flush()
    assert not (tmp_path / "cache").exists()


def test_loader_uses_the_workspace_cache_dir(make_ws: WriteWorkspace) -> None:
    ws = make_ws({"a/BUILD.marin": "x = 1\n", "b/BUILD.marin": "y = 2\n"})
    _age(ws.build_file("a"))
    _age(ws.build_file("b"))
    Loader(ws).load_all()  # writes the pack at the end of the load
    assert [p.name for p in (ws.cache_dir / "compiled").glob("*.bin")] == [codecache.PACK_NAME]
    assert len(codecache._read_pack(str(ws.cache_dir / "compiled" / codecache.PACK_NAME))) == 2
    Loader(ws, disk_cache=False).load_all()


# --- source-file hashing -------------------------------------------------------------------------


def test_hash_source_file_uses_the_stat_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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

    def no_reading(*args: object) -> None:
        raise AssertionError("an unchanged file must not be read again")

    monkeypatch.setattr(xxhash, "xxh3_128", no_reading)
    assert hash_source_file(data, reloaded) == digest
    monkeypatch.undo()

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
