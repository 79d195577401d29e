"""A corpus of broken workspaces: each must fail with an error at the right ``file:line`` saying what is wrong.

Every case writes its files into a fresh workspace (which also has ``rules/test.py`` from
conftest, defining ``tokenize``, ``train`` and ``needs_data``), loads everything, and
checks that the raised ``BuildFileError`` starts with the expected location and contains
the key words.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from marinbuild.load import BuildFileError, Loader, Workspace

WriteWorkspace = Callable[..., Workspace]

LOAD = 'load("//rules:test.py", "tokenize", "train", "needs_data")\n'


@dataclass
class Case:
    id: str
    files: dict[str, str]
    where: str | None  # expected "path:line" or "path:line:col" prefix of the message; None: no error
    words: list[str] = field(default_factory=list)


def build(text: str) -> dict[str, str]:
    """A single package ``a`` whose BUILD file is ``LOAD`` followed by ``text`` (so ``text`` starts on line 2)."""
    return {"a/BUILD.marin": LOAD + text}


CASES = [
    # --- syntax, and Python that is not Starlark --------------------------------------------
    Case("syntax", build('tokenize(name = "x"\n'), "a/BUILD.marin:2", ["syntax error"]),
    Case("syntax-indent", build("x = 1\n  y = 2\n"), "a/BUILD.marin:3", ["syntax error", "indentation"]),
    Case("import", build("import os\n"), "a/BUILD.marin:2:1", ["'import' is not Starlark", "load()"]),
    Case("from-import", build("from os import path\n"), "a/BUILD.marin:2:1", ["'from' is not Starlark", "load()"]),
    Case("while", build("while True:\n    pass\n"), "a/BUILD.marin:2:1", ["'while'", "for x in range"]),
    Case("global", build("X = 1\ndef f():\n    global X\n    X = 2\n"), "a/BUILD.marin:4:5", ["'global'"]),
    Case(
        "nonlocal", build("def f():\n    y = 1\n    def g():\n        nonlocal y\n"), "a/BUILD.marin:5:9", ["nonlocal"]
    ),
    Case("class", build("class A:\n    pass\n"), "a/BUILD.marin:2:1", ["'class' is not Starlark", "struct()"]),
    Case("try", build("try:\n    x = 1\nexcept:\n    pass\n"), "a/BUILD.marin:2:1", ["'try'", "fail()"]),
    Case("with", build("with x:\n    pass\n"), "a/BUILD.marin:2:1", ["'with'"]),
    Case("yield", build("def f():\n    yield 1\n"), "a/BUILD.marin:3:5", ["'yield'", "return a list"]),
    Case("async", build("async def f():\n    pass\n"), "a/BUILD.marin:2:1", ["'async' is not Starlark"]),
    Case("raise", build("raise ValueError('x')\n"), "a/BUILD.marin:2:1", ["'raise'", "fail("]),
    Case("assert", build("assert 1 == 2\n"), "a/BUILD.marin:2:1", ["'assert'", "fail("]),
    Case("match", build("match 1:\n    case 1:\n        pass\n"), "a/BUILD.marin:2:7", ["syntax error"]),
    Case("del", build("d = {1: 2}\ndel d[1]\n"), "a/BUILD.marin:3:1", ["'del'", "pop"]),
    Case("f-string", build('x = 1\ny = f"{x}"\n'), "a/BUILD.marin:3:5", ["f-strings are not Starlark", "%s"]),
    Case("set", build("x = set([1])\n"), "a/BUILD.marin:2:5", ["unknown name 'set'"]),
    Case("dunder-name", build("x = __name__\n"), "a/BUILD.marin:2:5", ["unknown name '__name__'"]),
    Case("dunder-attr", build("x = [].__class__\n"), "a/BUILD.marin:2:5", ["has no attribute `__class__`"]),
    Case("private-attr", build("x = struct(a = 1)._fields\n"), "a/BUILD.marin:2:5", ["no attribute `_fields`"]),
    Case("generator", build("g = (x for x in [])\n"), "a/BUILD.marin:2:8", ["syntax error"]),
    Case("open", build('x = open("f")\n'), "a/BUILD.marin:2:5", ["unknown name 'open'"]),
    Case("eval", build('x = eval("1")\n'), "a/BUILD.marin:2:5", ["unknown name 'eval'"]),
    Case("exec", build('exec("x = 1")\n'), "a/BUILD.marin:2:1", ["unknown name 'exec'"]),
    Case("getattr", build('x = getattr(struct(a=1), "b")\n'), "a/BUILD.marin:2:5", ["`.b` not supported"]),
    Case("dunder-import", build('os = __import__("os")\n'), "a/BUILD.marin:2:6", ["unknown name '__import__'"]),
    Case("globals", build("g = globals()\n"), "a/BUILD.marin:2:5", ["unknown name 'globals'"]),
    Case("breakpoint", build("breakpoint()\n"), "a/BUILD.marin:2:1", ["unknown name 'breakpoint'"]),
    Case("attribute-assignment", build("s = struct(a = 1)\ns.a = 2\n"), "a/BUILD.marin:3:1", ["`.a=` not supported"]),
    Case(
        "mutation-while-iterating",
        build("def f():\n    l = [1]\n    for x in l:\n        l.append(x)\nf()\n"),
        "a/BUILD.marin:5:9",
        ["mutates an iterable", "called from a/BUILD.marin:6:1"],
    ),
    # --- recursion: Starlark allows it, to a call depth of MAX_CALL_DEPTH -----------------------
    Case(
        "recursion-endless",
        build("def f(n):\n    return f(n - 1)\nf(3)\n"),
        "a/BUILD.marin:3:12",
        ["calls nested too deeply", "called from a/BUILD.marin:3:12", "more"],
    ),
    Case(
        "recursion-indirect",
        build("def f(n):\n    return g(n)\ndef g(n):\n    return f(n - 1)\nf(2)\n"),
        "a/BUILD.marin:3:12",
        ["calls nested too deeply"],
    ),
    # --- names, rules and attributes -------------------------------------------------------
    Case(
        "unknown-rule", build('tokenise(name = "x")\n'), "a/BUILD.marin:2:1", ["unknown name 'tokenise'", "'tokenize'"]
    ),
    Case("not-loaded", {"a/BUILD.marin": 'tokenize(name = "x")\n'}, "a/BUILD.marin:1:1", ["'tokenize'", "load()"]),
    Case(
        "unknown-attribute",
        build('tokenize(\n    name = "x",\n    tokeniser = "gpt2",\n)\n'),
        "a/BUILD.marin:4:5",
        ["no attribute 'tokeniser'", "did you mean 'tokenizer'", "attributes: name, srcs, tokenizer"],
    ),
    Case(
        "missing-mandatory",
        build('needs_data(name = "x")\n'),
        "a/BUILD.marin:2:1",
        ["missing the mandatory attribute 'data'"],
    ),
    Case("missing-name", build("tokenize()\n"), "a/BUILD.marin:2:1", ["mandatory attribute 'name'"]),
    Case("name-not-string", build("tokenize(name = 3)\n"), "a/BUILD.marin:2:10", ["'name' must be a string"]),
    Case("positional", build('tokenize("x")\n'), "a/BUILD.marin:2:1", ["keyword arguments only"]),
    Case(
        "wrong-type-int",
        build('train(\n    name = "x",\n    steps = "3",\n)\n'),
        "a/BUILD.marin:4:5",
        ["attribute 'steps'", "expected an int", "str '3'"],
    ),
    Case("wrong-type-float", build('train(name = "x", lr = True)\n'), "a/BUILD.marin:2:19", ["expected a float"]),
    Case("float-inf", build('train(name = "x", lr = float("inf"))\n'), "a/BUILD.marin:2:1", ["not a finite number"]),
    Case(
        "float-nan-nested",
        build('train(name = "x", extra = {"a": [float("nan")]})\n'),
        "a/BUILD.marin:2:1",
        ["not a finite number"],
    ),
    Case("info-is-not-inf", build('train(name = "x", tags = ["info", "nano"])\ninfo = 1\n'), None, []),
    Case("wrong-type-bool", build('train(name = "x", flag = 1)\n'), "a/BUILD.marin:2:19", ["expected True or False"]),
    Case("wrong-type-list", build('train(name = "x", tags = "a")\n'), "a/BUILD.marin:2:19", ["expected a list"]),
    Case("wrong-list-element", build('train(name = "x", tags = ["a", 2])\n'), "a/BUILD.marin:2", ["element 1"]),
    Case("wrong-type-dict", build('train(name = "x", extra = [1])\n'), "a/BUILD.marin:2", ["expected a dict"]),
    Case(
        "dict-function-value",
        build('train(name = "x", extra = {"f": len})\n'),
        "a/BUILD.marin:2:1",
        ["only plain values", "not a function"],
    ),
    Case("label-not-string", build('train(name = "x", dep = 3)\n'), "a/BUILD.marin:2", ["expected a label string"]),
    Case(
        "label-list-string", build('train(name = "x", deps = ":y")\n'), "a/BUILD.marin:2", ["expected a list of labels"]
    ),
    Case(
        "duplicate-label", build('train(name = "x", deps = [":y", "//a:y"])\n'), "a/BUILD.marin:2", ["more than once"]
    ),
    Case(
        "weights-not-numbers",
        build('train(name = "x", data = {":y": "heavy"})\n'),
        "a/BUILD.marin:2",
        ["value for key ':y'", "expected a float"],
    ),
    Case(
        "config-unknown-field",
        build('train(name = "x", config = {"steps": 1, "stepz": 2})\n'),
        "a/BUILD.marin:2",
        ["unknown field 'stepz'", "TrainConfig", "fields: steps, optim"],
    ),
    Case(
        "config-missing-field",
        build('train(name = "x", config = {"optim": {"lr": 1.0}})\n'),
        "a/BUILD.marin:2",
        ["missing field 'steps'"],
    ),
    Case(
        "config-nested-unknown",
        build('train(name = "x", config = {"steps": 1, "optim": {"lrr": 1.0}})\n'),
        "a/BUILD.marin:2",
        ["config.optim", "unknown field 'lrr'", "Optim"],
    ),
    Case("config-wrong-type", build('train(name = "x", config = 3)\n'), "a/BUILD.marin:2", ["TrainConfig"]),
    # --- labels and references -------------------------------------------------------------
    Case("bad-label", build('train(name = "x", dep = "//a/../b:c")\n'), "a/BUILD.marin:2:19", ["'..'"]),
    Case("bad-label-absolute", build('train(name = "x", dep = "/etc/passwd")\n'), "a/BUILD.marin:2", ["absolute"]),
    Case("external-label", build('train(name = "x", dep = "@marinbuild//rules:x")\n'), "a/BUILD.marin:2", ["load()"]),
    Case(
        "missing-package",
        build('train(name = "x", dep = "//nope:y")\n'),
        "a/BUILD.marin:2:19",
        ["no such package 'nope'", "BUILD.marin", "attribute 'dep' of //a:x"],
    ),
    Case(
        "missing-target",
        build('tokenize(name = "tok")\ntrain(\n    name = "x",\n    deps = [":tokk"],\n)\n'),
        "a/BUILD.marin:5:5",
        ["no such target '//a:tokk'", "did you mean ':tok'"],
    ),
    Case(
        "missing-target-other-package",
        {**build('train(name = "x", data = {"//b:y": 1.0})\n'), "b/BUILD.marin": LOAD},
        "a/BUILD.marin:2",
        ["no such target '//b:y'"],
    ),
    Case(
        "file-in-subpackage",
        {**build('train(name = "x", dep = "sub/f.txt")\n'), "a/sub/BUILD.marin": "", "a/sub/f.txt": "x"},
        "a/BUILD.marin:2",
        ["crosses into package 'a/sub'", "//a/sub:f.txt"],
    ),
    Case(
        "file-of-missing-package",
        {**build('train(name = "x", dep = "//a/data:f.txt")\n'), "a/data/f.txt": "x"},
        "a/BUILD.marin:2",
        ["no such package 'a/data'", "//a:data/f.txt"],
    ),
    Case(
        "source-files-other-package",
        {**build('tokenize(name = "x", srcs = ["//b:f.txt"])\n'), "b/BUILD.marin": "", "b/f.txt": "x"},
        "a/BUILD.marin:2",
        ["not in this package"],
    ),
    Case(
        "source-files-target",
        build('tokenize(name = "t")\ntokenize(name = "x", srcs = [":t"])\n'),
        "a/BUILD.marin:3",
        ["'//a:t' is a target", "takes source files"],
    ),
    Case(
        "source-file-missing",
        build('tokenize(name = "x", srcs = ["data/nope.jsonl"])\n'),
        "a/BUILD.marin:2",
        ["no such target '//a:data/nope.jsonl'", "no file"],
    ),
    Case(
        "duplicate-target",
        build('tokenize(name = "x")\ntokenize(\n    name = "x",\n)\n'),
        "a/BUILD.marin:4:5",
        ["duplicate target name 'x'", "already declared at a/BUILD.marin:2:1"],
    ),
    Case(
        "cycle",
        build('train(name = "x", deps = [":y"])\ntrain(name = "y", dep = ":x")\n'),
        "a/BUILD.marin:2:1",
        ["dependency cycle: //a:x -> //a:y -> //a:x"],
    ),
    Case("self-cycle", build('train(name = "x", dep = ":x")\n'), "a/BUILD.marin:2:1", ["cycle: //a:x -> //a:x"]),
    Case(
        "cycle-across-packages",
        {
            **build('train(name = "x", dep = "//b:y")\n'),
            "b/BUILD.marin": LOAD + 'train(name = "y", data = {"//a:x": 1})\n',
        },
        "a/BUILD.marin:2:1",
        ["dependency cycle: //a:x -> //b:y -> //a:x"],
    ),
    # --- target names that would escape the output prefix ------------------------------------
    Case("name-dotdot", build('tokenize(name = "a/../../etc")\n'), "a/BUILD.marin:2:10", ["'..'", "escape"]),
    Case("name-absolute", build('tokenize(name = "/tmp/x")\n'), "a/BUILD.marin:2:10", ["start with '/'"]),
    Case("name-backslash", build('tokenize(name = "a\\\\b")\n'), "a/BUILD.marin:2", ["backslash"]),
    Case("name-dot", build('tokenize(name = ".")\n'), "a/BUILD.marin:2", ["'.'"]),
    Case("name-empty", build('tokenize(name = "")\n'), "a/BUILD.marin:2", ["empty target name"]),
    Case("name-colon", build('tokenize(name = "a:b")\n'), "a/BUILD.marin:2", ["illegal character ':'"]),
    # --- fail(), runtime errors, macros --------------------------------------------------------
    Case("fail", build('x = 1\nfail("bad value", x)\n'), "a/BUILD.marin:3:1", ["fail: bad value 1"]),
    Case("zero-division", build("x = 1 // 0\n"), "a/BUILD.marin:2:5", ["division by zero"]),
    Case("key-error", build('x = {"a": 1}["b"]\n'), "a/BUILD.marin:2:5", ['Key `"b"` was not found']),
    Case(
        "fail-in-macro",
        {
            "lib/macros.star": 'def check(n):\n    if n < 0:\n        fail("n must be >= 0, got", n)\n',
            "a/BUILD.marin": 'load("//lib:macros.star", "check")\ncheck(1)\ncheck(-1)\n',
        },
        "lib/macros.star:3:9",
        ["fail: n must be >= 0, got -1"],
    ),
    Case(
        "error-in-macro-names-caller",
        {
            "lib/macros.star": "def div(n):\n    x = 1 // n\n    return x\n",
            "a/BUILD.marin": 'load("//lib:macros.star", "div")\nx = div(0)\n',
        },
        "lib/macros.star:2:9",
        ["division by zero", "called from a/BUILD.marin:2:5"],
    ),
    Case(
        "macro-attribute-error",
        {
            "lib/macros.star": LOAD + "def tok(name):\n    tokenize(name = name, tokenizer = 3)\n",
            "a/BUILD.marin": 'load("//lib:macros.star", "tok")\ntok("x")\n',
        },
        "a/BUILD.marin:2:1",
        ["expected a string", "in the macro at lib/macros.star:3:5"],
    ),
    Case(
        "glob-no-match",
        build('tokenize(name = "x", srcs = glob(["data/*.jsonl"]))\n'),
        "a/BUILD.marin:2:29",
        ["matched no files", "allow_empty"],
    ),
    Case("glob-bad-pattern", build('x = glob(["../*"], allow_empty = True)\n'), "a/BUILD.marin:2:5", ["'..'"]),
    Case("glob-string", build('x = glob("*.txt")\n'), "a/BUILD.marin:2:5", ["must be a list"]),
    Case(
        "glob-at-bzl-top-level",
        {"lib/x.star": 'FILES = glob(["*"])\n', "a/BUILD.marin": 'load("//lib:x.star", "FILES")\n'},
        "lib/x.star:1:9",
        ["glob() can only be used while a BUILD.marin file is evaluated"],
    ),
    Case(
        "rule-at-bzl-top-level",
        {"lib/x.star": LOAD + 'tokenize(name = "x")\n', "a/BUILD.marin": 'load("//lib:x.star", "tokenize")\n'},
        "lib/x.star:2:1",
        ["rule tokenize() can only be used while a BUILD.marin file is evaluated"],
    ),
    Case(
        "python-function-in-rules-module",
        {
            "rules/macro.py": "def bad():\n    raise ValueError('nope')\n",
            "a/BUILD.marin": 'load("//rules:macro.py", "bad")\nbad()\n',
        },
        "a/BUILD.marin:1:26",
        ["does not export 'bad'", "only its rule types and plain values"],
    ),
    # --- load() --------------------------------------------------------------------------------
    Case(
        "load-missing-file",
        {"a/BUILD.marin": '# a comment\nload("//lib:nope.star", "x")\n'},
        "a/BUILD.marin:2:1",
        ["cannot load '//lib:nope.star'", "lib/nope.star does not exist"],
    ),
    Case(
        "load-missing-symbol",
        {"a/BUILD.marin": 'load("//rules:test.py", "tokenise")\n'},
        "a/BUILD.marin:1:25",
        ["has no symbol 'tokenise'", "did you mean 'tokenize'"],
    ),
    Case(
        "load-private-symbol",
        {"a/BUILD.marin": 'load("//rules:test.py", "_hidden")\n'},
        "a/BUILD.marin:1:25",
        ["private symbol `_hidden`"],
    ),
    Case(
        "load-private-alias",
        {"a/BUILD.marin": 'load("//rules:test.py", h = "_hidden")\n'},
        "a/BUILD.marin:1:25",
        ["private"],
    ),
    Case(
        "load-private-from-bzl",
        {"lib/x.star": "_secret = 1\n", "a/BUILD.marin": 'load("//lib:x.star", "_secret")\n'},
        "a/BUILD.marin:1:22",
        ["private"],
    ),
    Case(
        "load-module-object",
        {"rules/mod.py": "import os\n", "a/BUILD.marin": 'load("//rules:mod.py", "os")\n'},
        "a/BUILD.marin:1:24",
        ["does not export 'os'"],
    ),
    Case(
        "load-non-literal",
        {"a/BUILD.marin": 'f = "//rules:test.py"\nload(f, "tokenize")\n'},
        "a/BUILD.marin:2:6",
        ["syntax error", "STRING"],
    ),
    Case(
        "load-symbol-non-literal",
        {"a/BUILD.marin": 's = "tokenize"\nload("//rules:test.py", s)\n'},
        "a/BUILD.marin:2:26",
        ["syntax error"],
    ),
    Case(
        "load-in-function",
        {"a/BUILD.marin": 'def f():\n    load("//rules:test.py", "tokenize")\n'},
        "a/BUILD.marin:2:5",
        ["`load` must only occur at the top of a module"],
    ),
    Case("load-no-symbols", {"a/BUILD.marin": 'load("//rules:test.py")\n'}, "a/BUILD.marin:1:6", ["at least two"]),
    Case(
        "load-cycle",
        {
            "lib/x.star": 'load(":y.star", "Y")\nX = 1\n',
            "lib/y.star": 'load(":x.star", "X")\nY = 1\n',
            "a/BUILD.marin": 'load("//lib:x.star", "X")\n',
        },
        "lib/y.star:1:1",
        ["load cycle: //lib:x.star -> //lib:y.star -> //lib:x.star"],
    ),
    Case(
        "load-bad-label",
        {"a/BUILD.marin": 'load("//lib/../x:y.star", "X")\n'},
        "a/BUILD.marin:1:1",
        ["'..'"],
    ),
    Case(
        "load-unknown-repo",
        {"a/BUILD.marin": 'load("@other//rules:x.py", "X")\n'},
        "a/BUILD.marin:1:1",
        ["unknown repository '@other'"],
    ),
    Case(
        "load-wrong-suffix",
        {"lib/x.txt": "", "a/BUILD.marin": 'load("//lib:x.txt", "X")\n'},
        "a/BUILD.marin:1:1",
        ["Starlark files loaded by BUILD files end in .star"],
    ),
    Case(
        "rules-module-import-error",
        {
            "rules/broken.py": "x = 1\nimport does_not_exist_anywhere\n",
            "a/BUILD.marin": 'load("//rules:broken.py", "x")\n',
        },
        "a/BUILD.marin:1:1",
        ["error importing rules module //rules:broken.py", "ModuleNotFoundError", "rules/broken.py:2"],
    ),
    Case(
        "bzl-syntax-error",
        {"lib/x.star": "X = (\n", "a/BUILD.marin": 'load("//lib:x.star", "X")\n'},
        "lib/x.star:1",
        ["syntax error"],
    ),
    Case(
        "bzl-forbidden",
        {"lib/x.star": "X = 1\nimport sys\n", "a/BUILD.marin": 'load("//lib:x.star", "X")\n'},
        "lib/x.star:2:1",
        ["'import' is not Starlark"],
    ),
    # --- frozen values --------------------------------------------------------------------------
    Case(
        "mutate-loaded-list",
        {"lib/x.star": "SIZES = [1, 2]\n", "a/BUILD.marin": 'load("//lib:x.star", "SIZES")\nSIZES.append(3)\n'},
        "a/BUILD.marin:2:1",
        ["cannot modify a frozen value", "list(value)"],
    ),
    Case(
        "mutate-loaded-dict",
        {"lib/x.star": "CFG = {'a': 1}\n", "a/BUILD.marin": 'load("//lib:x.star", "CFG")\nCFG["b"] = 2\n'},
        "a/BUILD.marin:2:1",
        ["cannot modify a frozen value", "dict(value)"],
    ),
    Case(
        "augmented-assign-loaded-list",
        {"lib/x.star": "L = [1]\n", "a/BUILD.marin": 'load("//lib:x.star", "L")\nL += [2]\n'},
        "a/BUILD.marin:2:1",
        ["frozen value"],
    ),
    Case(
        "mutate-nested-loaded",
        {"lib/x.star": "CFG = {'a': [1]}\n", "a/BUILD.marin": 'load("//lib:x.star", "CFG")\nCFG["a"].append(2)\n'},
        "a/BUILD.marin:2:1",
        ["frozen value"],
    ),
    Case(
        "mutate-default-argument",
        {
            "lib/x.star": "def add(x, acc = []):\n    acc.append(x)\n    return acc\n",
            "a/BUILD.marin": 'load("//lib:x.star", "add")\nadd(1)\n',
        },
        "lib/x.star:2:5",
        ["frozen value", "called from a/BUILD.marin:2:1"],
    ),
    Case(
        "mutate-rules-constant",
        {"rules/consts.py": "SIZES = [1, 2]\n", "a/BUILD.marin": 'load("//rules:consts.py", "SIZES")\nSIZES.pop()\n'},
        "a/BUILD.marin:2:1",
        ["frozen value"],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_broken_workspace(case: Case, make_ws: WriteWorkspace) -> None:
    ws = make_ws(case.files)
    if case.where is None:
        Loader(ws).load_all()
        return
    with pytest.raises(BuildFileError) as info:
        Loader(ws).load_all()
    message = str(info.value)
    assert message.startswith(case.where + ":"), message
    for word in case.words:
        assert word in message, f"{word!r} not in {message!r}"
    assert str(ws.root) not in message  # paths are workspace-relative


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


def test_errors_in_several_packages_are_all_reported(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "a/BUILD.marin": "import os\n",
            "b/BUILD.marin": LOAD + 'tokenize(name = "x", srcs = ["missing.txt"])\n',
            "c/BUILD.marin": "x = 1 // 0\n",
        }
    )
    with pytest.raises(BuildFileError) as info:
        Loader(ws).load_all()
    errors = info.value.all_errors
    assert [e.path for e in errors] == ["a/BUILD.marin", "b/BUILD.marin", "c/BUILD.marin"]
    assert [e.line for e in errors] == [1, 2, 1]


def test_references_into_a_broken_package_are_not_reported_twice(make_ws: WriteWorkspace) -> None:
    ws = make_ws({"a/BUILD.marin": LOAD + 'train(name = "x", dep = "//b:y")\n', "b/BUILD.marin": "fail('broken')\n"})
    with pytest.raises(BuildFileError) as info:
        Loader(ws).load_all()
    assert [str(e) for e in info.value.all_errors] == ["b/BUILD.marin:1:1: fail: broken"]


def test_build_file_error_fields_and_pickling() -> None:
    import pickle

    err = BuildFileError("a/BUILD.marin", 3, 7, "boom")
    assert str(err) == "a/BUILD.marin:3:7: boom"
    assert (err.path, err.line, err.col, err.message) == ("a/BUILD.marin", 3, 7, "boom")
    assert str(err.location) == "a/BUILD.marin:3:7"
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)


def test_a_broken_loaded_file_is_reported_once(make_ws: WriteWorkspace) -> None:
    ws = make_ws(
        {
            "lib/x.star": "X = 1 // 0\n",
            "a/BUILD.marin": 'load("//lib:x.star", "X")\n',
            "b/BUILD.marin": 'load("//lib:x.star", "X")\n',
        }
    )
    with pytest.raises(BuildFileError) as info:
        Loader(ws).load_all()
    assert [str(e) for e in info.value.all_errors] == ["lib/x.star:1:5: Floor division by zero: 1 // 0"]
