"""BUILD files written by an attacker or a careless user, run through the real CLI in a subprocess.

Each case is a workspace whose BUILD file tries one way of escaping hermetic, deterministic
loading. ``marinbuild query //...`` must either fail with exit status 2 and one located line
(``path:line:col: message``, no traceback) or succeed; and a sentinel file outside the
workspace, which every case that could write tries to write, must never exist.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

PY_RULES = 'load("@marinbuild//rules:python.py", "python_step", "executor_script")\n'


@dataclass
class Attack:
    id: str
    files: dict[str, str | Callable[[], str]]  # a callable: a text too big to make for every case, made when used
    where: str | None  # expected "path:line" prefix of the error; None: the load must succeed
    words: list[str] = field(default_factory=list)
    config: str = ""  # extra [tool.marinbuild] lines


def attacks(sentinel: str) -> list[Attack]:
    s = repr(sentinel).replace("'", '"')
    return [
        # --- host I/O through what a rules module imported ------------------------------------
        Attack(
            "rules-module-import-pathlib",
            {"a/BUILD.marin": 'load("@marinbuild//rules:python.py", "Path")\nPath(' + s + ').write_text("x")\n'},
            "a/BUILD.marin:1",
            ["does not export 'Path'"],
        ),
        Attack(
            "rules-module-import-helper",
            {"a/BUILD.marin": 'load("@marinbuild//rules:python.py", "load_script_steps")\n'},
            "a/BUILD.marin:1",
            ["does not export 'load_script_steps'"],
        ),
        Attack(
            "rules-module-private-function",
            {"a/BUILD.marin": 'load("@marinbuild//rules:python.py", "_import_function")\n'},
            "a/BUILD.marin:1",
            ["private"],
        ),
        Attack(
            "workspace-rules-module-exports-a-function",
            {
                "rules/evil.py": "from pathlib import Path\n\ndef write(p):\n    Path(p).write_text('x')\n",
                "a/BUILD.marin": 'load("//rules:evil.py", "write")\nwrite(' + s + ")\n",
            },
            "a/BUILD.marin:1",
            ["does not export 'write'"],
        ),
        Attack(
            "load-a-python-file-outside-rules",
            {
                "lib/evil.py": "open(" + s + ", 'w').write('x')\n",
                "a/BUILD.marin": 'load("//lib:evil.py", "x")\n',
            },
            "a/BUILD.marin:1",
            ["rules modules", "rules/"],
        ),
        Attack(
            "open-builtin", {"a/BUILD.marin": "open(" + s + ', "w")\n'}, "a/BUILD.marin:1:1", ["unknown name 'open'"]
        ),
        Attack("import-statement", {"a/BUILD.marin": "import os\n"}, "a/BUILD.marin:1:1", ["'import' is not Starlark"]),
        # --- a rule's trusted internals ---------------------------------------------------------
        Attack(
            "rule-implementation",
            {"a/BUILD.marin": PY_RULES + 'python_step.implementation(struct(attr = struct(fn = "os:system")))\n'},
            "a/BUILD.marin:2",
            ["has no attribute `implementation`"],
        ),
        Attack(
            "rule-analyze",
            {"a/BUILD.marin": PY_RULES + "x = executor_script.analyze\n"},
            "a/BUILD.marin:2",
            ["has no attribute `analyze`"],
        ),
        Attack(
            "rule-attribute-assignment",
            {
                "a/BUILD.marin": PY_RULES + 'python_step.output_name = "../../escaped"\n',
                "b/BUILD.marin": PY_RULES + 'python_step(name = "victim", fn = "m:f")\n',
            },
            "a/BUILD.marin:2:1",
            ["not supported"],
        ),
        Attack(
            "struct-attribute-assignment",
            {"a/BUILD.marin": "s = struct(a = 1)\ns.a = 2\n"},
            "a/BUILD.marin:2:1",
            ["not supported"],
        ),
        # --- coding cookies: Starlark reads UTF-8 and knows no cookie -----------------------------
        Attack(
            "coding-cookie-unicode-escape",
            {"a/BUILD.marin": "# coding: unicode_escape\nx = ().\\x5f\\x5fclass\\x5f\\x5f\n"},
            "a/BUILD.marin:2",
            ["syntax error"],
        ),
        Attack(
            "coding-cookie-latin1-bytes",
            {"a/BUILD.marin": "# coding: latin-1\nx = 'caf\udce9'\n"},
            "a/BUILD.marin:2",
            ["not UTF-8"],
        ),
        # --- a compiled-file cache shipped in the workspace is not read ---------------------------
        Attack(
            "shipped-compiled-cache",
            {
                "a/BUILD.marin": PY_RULES + 'python_step(name = "x", fn = "m:f")\n',
                ".marinbuild/compiled/files.bin": "not what marinbuild wrote",
            },
            None,
        ),
        # --- frozen values cannot be changed from another package ---------------------------------
        Attack(
            "frozen-list-append",
            {
                "lib/shared.star": "SHARED = []\n",
                "a/BUILD.marin": 'load("//lib:shared.star", "SHARED")\nSHARED.append("x")\n',
            },
            "a/BUILD.marin:2:1",
            ["frozen"],
        ),
        Attack(
            "frozen-dict-update",
            {
                "lib/shared.star": "CFG = {}\n",
                "a/BUILD.marin": 'load("//lib:shared.star", "CFG")\nCFG.update({"lr": 1})\n',
            },
            "a/BUILD.marin:2:1",
            ["frozen"],
        ),
        Attack(
            "frozen-closure-state",
            {
                "lib/shared.star": "_seen = []\ndef count():\n    _seen.append(1)\n    return len(_seen)\n",
                "a/BUILD.marin": 'load("//lib:shared.star", "count")\nn = count()\n',
            },
            "lib/shared.star:3:5",
            ["frozen", "called from a/BUILD.marin:2:5"],
        ),
        Attack(
            "frozen-rules-constant",
            {
                "rules/consts.py": "SIZES = [1, 2]\n",
                "a/BUILD.marin": 'load("//rules:consts.py", "SIZES")\nSIZES.append(3)\n',
            },
            "a/BUILD.marin:2:1",
            ["frozen"],
        ),
        # --- nondeterministic values do not exist -------------------------------------------------
        Attack("set", {"a/BUILD.marin": 'x = list(set(["a", "b", "c"]))\n'}, "a/BUILD.marin:1:10", ["'set'"]),
        Attack(
            "addresses-in-strings",
            {
                "a/BUILD.marin": PY_RULES
                + "def f():\n    return 1\n"
                + 'python_step(name = "x", fn = "m:f", config = {"s": str(f) + str(len) + repr(struct(a = f))})\n'
            },
            None,
        ),
        # --- deep nesting, huge files -------------------------------------------------------------
        Attack(
            "deep-tuple-key",
            {"a/BUILD.marin": "x = {" + "(" * 1_000_000 + ")" * 1_000_000 + ": 1}\n"},
            "a/BUILD.marin:1:1",
            ["too deeply nested"],
        ),
        Attack("deep-unary", {"a/BUILD.marin": "x = " + "-" * 200_000 + "1\n"}, "a/BUILD.marin:1:1", ["nested"]),
        Attack("deep-lambda", {"a/BUILD.marin": "x = " + "lambda: " * 20_000 + "1\n"}, "a/BUILD.marin:1:1", ["nested"]),
        Attack(
            "long-concatenation", {"a/BUILD.marin": "def f():\n    pass\nx = " + " + ".join(['"s"'] * 600) + "\n"}, None
        ),
        Attack(
            "deep-attributes",
            {"a/BUILD.marin": "s = struct(a = 1)\nx = s" + ".a" * 10_000 + "\n"},
            "a/BUILD.marin:2:5",
            ["has no attribute `a`"],
        ),
        Attack(
            "huge-file",
            {"a/BUILD.marin": lambda: "# " + "x" * (100 * 1024 * 1024) + "\n"},
            "a/BUILD.marin:1:1",
            ["file too large"],
        ),
        Attack(
            "deep-value-given-to-a-rule",
            {
                "a/BUILD.marin": PY_RULES
                + "def deep():\n    x = []\n    for i in range(1000000):\n        x = [x]\n    return x\n"
                + 'python_step(name = "x", fn = "m:f", config = {"x": deep()})\n'
            },
            "a/BUILD.marin:7:1",
            ["nested more than 100 levels"],
        ),
        Attack(
            "deep-struct-given-to-a-rule",
            {
                "a/BUILD.marin": PY_RULES
                + "s = struct()\nfor i in range(100000):\n    s = struct(a = s)\n"
                + 'python_step(name = "x", fn = "m:f", config = {"x": s})\n'
            },
            "a/BUILD.marin:5:1",
            ["nested more than 100 levels"],
        ),
        Attack(
            "cyclic-value-given-to-a-rule",
            {
                "a/BUILD.marin": PY_RULES
                + 'x = []\nx.append(x)\npython_step(name = "x", fn = "m:f", config = {"x": x})\n'
            },
            "a/BUILD.marin:4:1",
            ["contains itself"],
        ),
        Attack(
            "deep-comparison",
            {"a/BUILD.marin": "x = []\ny = []\nfor i in range(1000000):\n    x = [x]\n    y = [y]\nz = x == y\n"},
            "a/BUILD.marin:6:5",
            ["recursion"],
        ),
        Attack(
            "json-encode", {"a/BUILD.marin": "x = json.encode([1])\n"}, "a/BUILD.marin:1:5", ["unknown name 'json'"]
        ),
        # --- endless loops and recursion ----------------------------------------------------------
        Attack(
            "append-while-iterating",
            {"a/BUILD.marin": "l = [1]\nfor x in l:\n    l.append(x)\n"},
            "a/BUILD.marin:3:5",
            ["mutates an iterable"],
        ),
        Attack("while-loop", {"a/BUILD.marin": "while True:\n    pass\n"}, "a/BUILD.marin:1:1", ["'while'"]),
        Attack(
            "long-loop-budget",
            {"a/BUILD.marin": "n = 0\nfor i in range(2000000000):\n    n += i\n"},
            "a/BUILD.marin:",
            ["budget of 1 s", "eval_budget_seconds"],
            config="eval_budget_seconds = 1\n",
        ),
        Attack(
            "exponential-recursion-budget",
            {"a/BUILD.marin": "def f(n):\n    return f(n - 1) + f(n - 1) if n else 1\nx = f(60)\n"},
            "a/BUILD.marin:",
            ["budget of 1 s"],
            config="eval_budget_seconds = 1\n",
        ),
        Attack(
            "endless-recursion",
            {"a/BUILD.marin": "def f():\n    return f()\nf()\n"},
            "a/BUILD.marin:2:12",
            ["calls nested too deeply"],
        ),
        Attack(
            "recursive-macro-declaring-targets",
            {
                "a/BUILD.marin": PY_RULES
                + 'def m(n):\n    python_step(name = "t%d" % n, fn = "m:f")\n    m(n + 1)\nm(0)\n'
            },
            "a/BUILD.marin:",
            ["calls nested too deeply"],
        ),
    ]


CASE_IDS = [a.id for a in attacks("/x")]
_LOCATED = re.compile(r"^marinbuild: error: (\S+:\d+:\d+): \S")


def _workspace(root: Path, attack: Attack) -> Path:
    ws = root / "ws"
    ws.mkdir(parents=True)
    (ws / "pyproject.toml").write_text(f"[project]\nname = 'x'\n\n[tool.marinbuild]\n{attack.config}")
    for rel, text in attack.files.items():
        path = ws / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((text() if callable(text) else text).encode("utf-8", "surrogateescape"))
    return ws


def run_cli(ws: Path, *args: str, seed: str = "0") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_attack_fails_located_or_loads_and_never_writes_outside(case_id: str, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    attack = next(a for a in attacks(str(sentinel)) if a.id == case_id)
    ws = _workspace(tmp_path, attack)
    result = run_cli(ws, "query", "//...")
    assert "Traceback" not in result.stderr, result.stderr
    if attack.where is None:
        assert result.returncode == 0, result.stderr
        again = run_cli(ws, "query", "//...", "--output", "json", seed="1")
        assert again.returncode == 0 and again.stdout == run_cli(ws, "query", "//...", "--output", "json").stdout
    else:
        assert result.returncode == 2, (result.returncode, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        located = _LOCATED.match(lines[0])
        assert located is not None, lines[0]
        assert (located.group(1) + ":").startswith(attack.where), lines[0]
        for word in attack.words:
            assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert not sentinel.exists()


# --- BUILD files that exhaust memory or build values too large to write out ---------------------------------------
# Run under an address-space limit (as ``ulimit -v`` would set), with ``RUST_BACKTRACE=1`` in the environment (the
# setting under which a panic of starlark-rust could block the process) and a timeout.

MEMORY_LIMIT = 2_000_000_000
DOUBLED = "x = [1]\n" + "x = [x, x]\n" * 50  # 2**50 elements once written out


def _limited_cli(ws: Path) -> subprocess.CompletedProcess[str]:
    import resource

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))

    env = {**os.environ, "RUST_BACKTRACE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", "query", "//..."],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=limit,
    )


@pytest.mark.parametrize(
    ("build", "where", "word"),
    [
        pytest.param(
            "x = 1\ny = [[i * j for i in range(100000)] for j in range(100000)]\n",
            "a/BUILD.marin:2:",
            "memory",
            id="nested-comprehension",
        ),
        pytest.param(
            's = ""\nfor i in range(10000000):\n    s = s + "%s"\n' % ("x" * 60),
            "a/BUILD.marin:2:",
            "memory",
            id="string-grown-in-a-loop",
        ),
        pytest.param('s = "x"\nfor i in range(64):\n    s = s + s\n', "a/BUILD.marin:", "memory", id="string-doubled"),
        pytest.param(
            PY_RULES + DOUBLED + 'python_step(name = "t", fn = "m:f", config = {"x": x})\n',
            "a/BUILD.marin:53:1",
            "too large",
            id="doubled-list-given-to-a-rule",
        ),
        pytest.param(
            "def big():\n    x = [1]\n    for i in range(50):\n        x = [x, x]\n    return x\n\ny = str(big())\n",
            "a/BUILD.marin:7:5",
            "too large",
            id="str-of-a-list-doubled-in-a-function",
        ),
        pytest.param(DOUBLED + "fail(x)\n", "a/BUILD.marin:52:1", "too large", id="fail-of-a-doubled-list"),
        pytest.param(DOUBLED + 'print("%s" % len(x), x)\n', "a/BUILD.marin:52:1", "too large", id="print-of-it"),
        pytest.param(DOUBLED + "srcs = glob(x)\n", "a/BUILD.marin:52:8", "too large", id="glob-of-it"),
    ],
)
def test_build_file_exhausting_memory_fails_located(build: str, where: str, word: str, tmp_path: Path) -> None:
    ws = _workspace(tmp_path, Attack("memory", {"a/BUILD.marin": build}, where))
    result = _limited_cli(ws)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "panicked" not in result.stderr and "RUST_BACKTRACE" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    located = _LOCATED.match(lines[0])
    assert located is not None, lines[0]
    assert (located.group(1) + ":").startswith(where), lines[0]
    assert word in lines[0], lines[0]


def test_fail_of_a_large_value_prints_a_bounded_line(tmp_path: Path) -> None:
    ws = _workspace(tmp_path, Attack("fail", {"a/BUILD.marin": 'x = ["a" * 100] * 20000\nfail(x)\n'}, ""))
    result = run_cli(ws, "query", "//...")
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 1000, result.stderr[-3000:]
    assert lines[0].startswith("marinbuild: error: a/BUILD.marin:2:1: fail: ")
    assert re.search(r"\.\.\. \(\d+ more characters\)$", lines[0]), lines[0]


# --- BUILD files whose evaluation cannot be stopped from inside: the child evaluating them dies or is killed -------
DOUBLED_TWICE = "x = [1]\ny = [1]\n" + "x = [x, x]\ny = [y, y]\n" * 50  # two equal values of 2**50 elements


@pytest.mark.parametrize(
    ("build", "words"),
    [
        pytest.param('x = 1\ny = "x" * 2000000000\n', ["evaluation aborted", "2,000,000,000 bytes"], id="repetition"),
        pytest.param(DOUBLED + 'y = "%s" % x\n', ["evaluation"], id="format-of-a-doubled-list"),
        pytest.param(DOUBLED_TWICE + "z = x == y\n", ["budget of 1 s"], id="comparison-of-doubled-lists"),
    ],
)
def test_build_file_ending_its_evaluator_fails_at_the_file(build: str, words: list[str], tmp_path: Path) -> None:
    files = {"a/BUILD.marin": build, "b/BUILD.marin": "x = 1\n"}
    ws = _workspace(tmp_path, Attack("ender", files, None, config="eval_budget_seconds = 1\n"))
    result = _limited_cli(ws)
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr and "panicked" not in result.stderr, result.stderr[-3000:]
    assert "memory allocation" not in result.stderr and "RUST_BACKTRACE" not in result.stderr, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("marinbuild: error: a/BUILD.marin:1:1: evaluation "), lines[0]
    for word in words:
        assert word in lines[0], lines[0]
