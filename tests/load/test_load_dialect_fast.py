"""The dialect's fast path (compile directly, no AST objects) must agree with the full AST check.

For every source it accepts, the fast path must give exactly the code and ``load()``
statements the full check gives; anything doubtful must be left to the full check, which
alone reports errors.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_load_broken import CASES

from marinbuild.load import dialect
from marinbuild.load.errors import BuildFileError

REPO = Path(__file__).resolve().parents[2]

PLAIN = [
    'load("//rules:x.py", "a", b = "c")\nz = 1\n',
    'load(\n    "//rules:x.py",  # rule types\n    "a",\n    b = "c",\n)\nload("//lib:m.bzl", "M")\nx = [M, 1]\n',
    "x = {'a': [1, 2.5e3, 0xdef], 'b': (True, None)}\ny = [v for v in x if v]\nz = f'{len(y)}'\n",
    'load("//rules:x.py", "a")\na(name = "t", deps = [":u", "//p:q"], cfg = {"lr": 1e-3})\n',
    'load("//rules:x.py", "a")\r\nx = 1\r\n',
    "",
]

DOUBTFUL = [  # valid or not, the fast path must leave these to the full check
    'x = [\nload("//rules:x.py", "a")\n]\n',  # load() inside an expression
    'x or (\nload("//rules:x.py", "a"))\n',
    'load("//rules:x.py", "a") if x else 0\n',
    'y = load\nload("//rules:x.py", "a")\n',
    'x = """\nload("//rules:x.py", "a")\n"""\n',  # looks like a load, is a string
    's = "abc\\\nload(1)"\n',  # backslash continuation
    'load("//rules:x.py")\n',  # an error: the full check reports it
    'load("//rules:x.py", "_private")\n',
    "def f():\n    return 1\n",  # functions need the recursion guard
    "f = lambda: 1\n",
    "x = __name__\n",
    "x = y._z\n",
    "if False:\n    import os\n",  # dead code still counts
    "if False:\n    x = open('f')\n",
    "x = 1\nglobal x\n",
    'x = "ü"\n',
    "x = [\n",  # syntax error
    "[x for x in range(3) if load]\n",
    'x = 1\nload("//rules:x.py", "a")\n',  # fast only when the loads come first
]


def _same(source: str) -> None:
    fast = dialect._compile_plain(source, "f.marin", "f.marin")
    if fast is None:
        return
    full = dialect.compile_checked(source, "f.marin", "f.marin")
    assert fast.code == full.code
    assert fast.loads == full.loads


@pytest.mark.parametrize("source", PLAIN)
def test_plain_files_take_the_fast_path_and_match_the_full_check(source: str) -> None:
    assert dialect._compile_plain(source, "f.marin", "f.marin") is not None
    _same(source)


@pytest.mark.parametrize("source", DOUBTFUL)
def test_doubtful_files_are_left_to_the_full_check(source: str) -> None:
    assert dialect._compile_plain(source, "f.marin", "f.marin") is None


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_broken_corpus_sources_agree(case: object) -> None:
    for text in case.files.values():  # type: ignore[attr-defined]
        fast = dialect._compile_plain(text, "f.marin", "f.marin")
        if fast is None:
            continue
        try:
            full = dialect.compile_checked(text, "f.marin", "f.marin")
        except BuildFileError as exc:  # pragma: no cover - would be a fast-path bug
            pytest.fail(f"fast path accepted a file the full check rejects: {exc}")
        assert fast.code == full.code and fast.loads == full.loads


def test_repository_build_files_agree() -> None:
    files = sorted(REPO.glob("experiments/**/BUILD.marin"))
    assert files
    for path in files:
        _same(path.read_text())


LOAD_TEXTS = [  # (text, whether the fast parse must accept it)
    ('load("//a:b.bzl", "x")', True),
    ("load('//a:b.bzl', 'x', y = 'z')", True),
    ('load(\n  "//a:b.bzl",  # rule types\n  "x",\n  y="z",\n)', True),
    ('load("a" , "b" , c="d" , )', True),
    ('load("a",\r\n "b")', True),
    ('load("a", case = "b", print = "c")', True),
    ('load("a" "b", "x")', False),  # implicit concatenation
    ('load("a", "b" "c")', False),
    ('load(r"a", "x")', False),
    ('load(f"a", "x")', False),
    ('load(b"a", "x")', False),
    ('load(u"a", "x")', False),
    ('load("a", x)', False),
    ('load("a", x = y)', False),
    ('load("a", x = "y", "z")', False),  # positional after keyword
    ('load("a", x = "y", x = "z")', False),  # repeated keyword
    ('load("a", if = "y")', False),
    ('load("a", True = "y")', False),
    ('load("a", x == "y")', False),
    ('load("a", x = = "y")', False),
    ("load()", False),
    ('load("a")', False),
    ('load("a",)', False),
    ("load(,)", False),
    ('load("a",, "b")', False),
    ('load("a", "b",,)', False),
    ('load("a", "b c")', False),
    ('load("a", "_x")', False),
    ('load("a", x = "_y")', False),
    ('load("a", "1x")', False),
    ('load(x = "a")', False),
    ('load("a", "b"\r)', False),
    ('load("a", "b\rc")', False),
    ('load("a", # c\r "b")', False),
    ('load("a", x\n= "b")', True),
    ('load("a", "b")', True),
]


@pytest.mark.parametrize(("text", "fast"), LOAD_TEXTS)
def test_load_statements_parse_as_the_full_check_parses_them(text: str, fast: bool) -> None:
    import ast

    assert dialect._LOAD_CALL.fullmatch(text.encode()), "not a text the fast path would parse"
    try:
        stmt = ast.parse(text).body[0]
        assert isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
        found = dialect._Checker("f.marin")._load_statement(stmt.value)
        expected: object = (found.label, found.symbols)
    except (SyntaxError, BuildFileError):
        expected = None
    parsed = dialect._parse_load(text.encode())
    if fast:
        assert expected is not None and parsed == expected
    else:
        assert parsed is None


def test_load_positions_are_those_of_the_full_check() -> None:
    source = '# rules\n\nload(\n    "//rules:x.py",\n    "a",\n)\n'
    fast = dialect._compile_plain(source, "f.marin", "f.marin")
    assert fast is not None and fast.loads == (dialect.LoadStatement("//rules:x.py", (("a", "a"),), 3, 1),)
