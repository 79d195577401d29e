"""The marinbuild CLI, through click's runner (in-process) and as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from workspaces import repository_workspace

from marinbuild.cli import main

STEPS_PY = '''
import os


def write(config):
    """Write the config's text plus the dependencies' out.txt into out.txt; log the call."""
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["output_path"] + "\\n")
    if config.get("fail"):
        raise RuntimeError("asked to fail")
    parts = []
    for dep in config["deps"]:
        with open(os.path.join(dep, "out.txt")) as f:
            parts.append(f.read())
    for src in config["srcs"]:
        with open(src) as f:
            parts.append(f.read().strip())
    parts.append(str(config.get("text", "")))
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write("+".join(parts))
    return {"parts": len(parts)}
'''

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "steps:write", config = {"text": "A"}, srcs = ["data/a.txt"])
python_step(name = "b", fn = "steps:write", config = {"text": "B"}, deps = [":a"])
python_step(name = "c", fn = "steps:write", config = {"text": "C"}, deps = [":b"])
python_step(name = "other", fn = "steps:write", config = {"text": "O"})
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / "pipe" / "data").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "steps.py").write_text(STEPS_PY)
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    (root / "pipe" / "data" / "a.txt").write_text("data-a\n")
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setenv("MB_CALLS", str(calls))
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    monkeypatch.chdir(root)
    return root


def calls(root: Path) -> list[str]:
    text = Path(os.environ["MB_CALLS"]).read_text().split()
    Path(os.environ["MB_CALLS"]).write_text("")
    return [Path(p).name.rsplit("-", 1)[0] for p in text]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_build_then_noop_then_incremental(ws, capsys):
    code, out, _ = run(["//pipe:c"], capsys)
    assert code == 0
    assert calls(ws) == ["a", "b", "c"]
    assert "//pipe:c" in out and str(ws / "out" / "pipe" / "c-") in out
    c_dir = next((ws / "out" / "pipe").glob("c-*"))
    assert (c_dir / "out.txt").read_text() == "data-a+A+B+C"

    code, _, _ = run(["//pipe:c"], capsys)
    assert code == 0 and calls(ws) == []

    # Editing a versioned value rebuilds exactly that step and what depends on it.
    build = (ws / "pipe" / "BUILD.marin").read_text().replace('"text": "B"', '"text": "B2"')
    (ws / "pipe" / "BUILD.marin").write_text(build)
    assert run(["//pipe:c"], capsys)[0] == 0
    assert calls(ws) == ["b", "c"]

    # Editing a source file rebuilds everything downstream of it, nothing else.
    (ws / "pipe" / "data" / "a.txt").write_text("data-a2\n")
    assert run(["//pipe:all"], capsys)[0] == 0
    assert sorted(calls(ws)) == ["a", "b", "c", "other"]
    (ws / "pipe" / "data" / "a.txt").write_text("data-a3\n")
    assert run(["//pipe:all"], capsys)[0] == 0
    assert calls(ws) == ["a", "b", "c"]


def test_patterns_and_subtraction(ws, capsys):
    code, out, _ = run(["//pipe/...", "-//pipe:other"], capsys)
    assert code == 0
    assert sorted(calls(ws)) == ["a", "b", "c"]
    assert "//pipe:other" not in out


def test_dry_run_reports_and_writes_nothing(ws, capsys):
    code, out, _ = run(["-n", "//pipe:c"], capsys)
    assert code == 0
    assert not (ws / "out").exists()
    assert calls(ws) == []
    assert "missing" in out and "pipe/c" in out
    run(["//pipe:a"], capsys)
    calls(ws)
    code, out, _ = run(["--dry_run", "--output", "json", "//pipe:c"], capsys)
    plan = {p["step"]: p["state"] for p in json.loads(out)["plan"]}
    assert plan == {"pipe/c": "missing", "pipe/b": "missing", "pipe/a": "built"}


def test_failure_exit_1_and_keep_going(ws, capsys):
    build = (ws / "pipe" / "BUILD.marin").read_text()
    build += 'python_step(name = "bad", fn = "steps:write", config = {"fail": True})\n'
    build += 'python_step(name = "after_bad", fn = "steps:write", deps = [":bad"])\n'
    (ws / "pipe" / "BUILD.marin").write_text(build)
    code, _, err = run(["-k", "-j", "1", "//pipe:after_bad", "//pipe:other"], capsys)
    assert code == 1
    assert "pipe/bad" in err
    assert sorted(calls(ws)) == ["bad", "other"]


def test_json_output_and_event_files(ws, capsys, tmp_path):
    bep = tmp_path / "events.jsonl"
    trace = tmp_path / "trace.json"
    code, out, _ = run(
        ["--output", "json", "--build_event_json_file", str(bep), "--profile", str(trace), "//pipe:b"], capsys
    )
    assert code == 0
    result = json.loads(out)
    assert result["targets"][0]["label"] == "//pipe:b"
    kinds = [json.loads(line)["kind"] for line in bep.read_text().splitlines()]
    assert kinds.count("succeeded") == 2
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "step"} == {"pipe/a", "pipe/b"}


BROKEN = [
    ("syntax", 'python_step(name = "x", fn = "steps:write"\n', "BUILD.marin:1"),
    ("import", "import os\n", "BUILD.marin:1"),
    ("unknown rule", 'load("@marinbuild//rules:python.py", "python_step")\nnope(name = "x")\n', "BUILD.marin:2"),
    (
        "unknown attr",
        'load("@marinbuild//rules:python.py", "python_step")\npython_step(name = "x", fn = "steps:write", bogus = 1)\n',
        "BUILD.marin:2",
    ),
    ("missing attr", 'load("@marinbuild//rules:python.py", "python_step")\npython_step(name = "x")\n', "BUILD.marin:2"),
    (
        "wrong type",
        'load("@marinbuild//rules:python.py", "python_step")\npython_step(name = "x", fn = 3)\n',
        "BUILD.marin:2",
    ),
    (
        "bad label",
        'load("@marinbuild//rules:python.py", "python_step")\n'
        'python_step(name = "x", fn = "steps:write", deps = ["//a//b"])\n',
        "BUILD.marin:2",
    ),
    (
        "missing target",
        'load("@marinbuild//rules:python.py", "python_step")\n'
        'python_step(name = "x", fn = "steps:write", deps = [":nope"])\n',
        "BUILD.marin:2",
    ),
    (
        "duplicate",
        'load("@marinbuild//rules:python.py", "python_step")\n'
        'python_step(name = "x", fn = "steps:write")\npython_step(name = "x", fn = "steps:write")\n',
        "BUILD.marin:3",
    ),
    (
        "cycle",
        'load("@marinbuild//rules:python.py", "python_step")\n'
        'python_step(name = "x", fn = "steps:write", deps = [":y"])\n'
        'python_step(name = "y", fn = "steps:write", deps = [":x"])\n',
        "BUILD.marin:",
    ),
    (
        "escape",
        'load("@marinbuild//rules:python.py", "python_step")\npython_step(name = "../x", fn = "steps:write")\n',
        "BUILD.marin:2",
    ),
]


@pytest.mark.parametrize(("case", "text", "where"), BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_build_files_exit_2_and_write_nothing(ws, capsys, case, text, where):
    (ws / "bad").mkdir()
    (ws / "bad" / "BUILD.marin").write_text(text)
    code, out, err = run(["//pipe:a", "//bad:all"], capsys)
    assert code == 2, err
    assert where in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) >= 1
    assert not (ws / "out").exists()
    assert calls(ws) == []


def test_usage_errors_are_one_line_exit_2(ws, capsys):
    for args in (
        ["--jobs", "x", "//pipe:a"],
        ["--backend", "nowhere", "//pipe:a"],
        ["query", "depz(//pipe:a)"],
        ["//pipe:nope"],
        ["-j", "0", "//pipe:a"],
    ):
        code, _, err = run(args, capsys)
        assert code == 2, (args, code, err)
        assert err.startswith("marinbuild: error:"), err
        assert len(err.strip().splitlines()) == 1, err
    assert not (ws / "out").exists()


def test_query_outputs(ws, capsys):
    code, out, _ = run(["query", "deps(//pipe:c)"], capsys)
    assert code == 0 and out.split() == ["//pipe:a", "//pipe:b", "//pipe:c"]
    code, out, _ = run(["query", "rdeps(//pipe/..., //pipe:a)", "--output", "label_kind"], capsys)
    assert "python_step rule //pipe:c" in out
    code, out, _ = run(["query", "kind(python_step, //...) - deps(//pipe:b)", "--output", "json"], capsys)
    assert [t["label"] for t in json.loads(out)] == ["//pipe:c", "//pipe:other"]
    code, out, _ = run(["query", "deps(//pipe:c)", "--output", "graph"], capsys)
    assert '"//pipe:c" -> "//pipe:b"' in out
    run(["//pipe:a"], capsys)
    code, out, _ = run(["query", "built(//pipe:all)"], capsys)
    assert out.split() == ["//pipe:a"]
    code, out, _ = run(["query", "missing(//pipe:all)"], capsys)
    assert out.split() == ["//pipe:b", "//pipe:c", "//pipe:other"]


def test_subprocess_hello_world_from_this_repository(tmp_path):
    repo = repository_workspace(tmp_path / "repo")
    env = dict(os.environ, MARIN_PREFIX=str(tmp_path / "p"))
    cmd = [sys.executable, "-m", "marinbuild", "//experiments/tutorials:hello_world"]
    first = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "hello_world/stats-bb8009" in first.stdout  # the path the script itself gives (Marin's hash)
    stats = json.loads((tmp_path / "p" / "hello_world" / "stats-bb8009" / "stats.json").read_text())
    assert set(stats) == {"sum", "min", "max"}
    second = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "0 built" in second.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "marinbuild", "//experiments/nope:x"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_why_explain_and_cache_commands(ws, capsys):
    assert run(["//pipe:c"], capsys)[0] == 0
    calls(ws)
    code, out, _ = run(["why", "//pipe:c"], capsys)
    assert code == 0 and "up to date" in out
    build = (ws / "pipe" / "BUILD.marin").read_text().replace('"text": "A"', '"text": "A2"')
    (ws / "pipe" / "BUILD.marin").write_text(build)
    code, out, _ = run(["why", "//pipe:c"], capsys)
    assert code == 0
    assert '"A" -> "A2"' in out  # the changed field of pipe/a, with old and new values
    assert "dependency pipe/b" in out  # c reruns because its dependency's version changed
    code, out, _ = run(["-n", "--explain", "//pipe:c"], capsys)
    assert code == 0 and "why: version changed" in out
    code, out, _ = run(["cache", "status", "//pipe:all"], capsys)
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[1:] if line.strip()}
    assert rows == {"//pipe:a": "stale", "//pipe:b": "stale", "//pipe:c": "stale", "//pipe:other": "missing"}
    code, out, _ = run(["cache", "ls", "--output", "json"], capsys)
    assert sorted(Path(e["output_path"]).name.rsplit("-", 1)[0] for e in json.loads(out)) == ["a", "b", "c"]
    code, out, _ = run(["cache", "gc", "//pipe:c"], capsys)
    assert "3 unused" in out and "Nothing deleted" in out
    assert len(list((ws / "out" / "pipe").iterdir())) == 3
    code, out, _ = run(["cache", "gc", "--yes", "//pipe:c"], capsys)
    assert code == 0 and not list((ws / "out" / "pipe").iterdir())
    (ws / ".marinbuild" / "compiled").mkdir(parents=True, exist_ok=True)  # caches skip just-written files
    code, out, _ = run(["clean"], capsys)
    assert code == 0 and not (ws / ".marinbuild").exists()
    assert calls(ws) == []


def test_without_keep_going_nothing_new_starts_after_a_failure(ws, capsys):
    build = (ws / "pipe" / "BUILD.marin").read_text()
    build += 'python_step(name = "bad", fn = "steps:write", config = {"fail": True})\n'
    (ws / "pipe" / "BUILD.marin").write_text(build)
    code, out, _ = run(["-j", "1", "--output", "json", "//pipe:bad", "//pipe:other"], capsys)
    assert code == 1
    assert calls(ws) == ["bad"]  # "bad" comes first in dependency order; "other" is never started
    assert json.loads(out)["counts"]["skipped"] == 1


def test_click_runner(ws):
    from click.testing import CliRunner

    from marinbuild.cli import cli

    result = CliRunner().invoke(cli, ["query", "deps(//pipe:b)"])
    assert result.exit_code == 0 and result.output.split() == ["//pipe:a", "//pipe:b"]
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "query" in result.output and "cache" in result.output


@pytest.mark.parametrize("words", ["marinbuild //pipe:", "marinbuild build //pipe:", "marinbuild why //pipe:"])
def test_shell_completion_of_labels(ws, words):
    """The bash script of ``_MARINBUILD_COMPLETE=bash_source`` asks the command this way (click's protocol)."""
    env = {**os.environ, "_MARINBUILD_COMPLETE": "bash_complete", "COMP_WORDS": words}
    env["COMP_CWORD"] = str(len(words.split()) - 1)
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild"], cwd=ws, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    completions = {line.removeprefix("plain,") for line in done.stdout.splitlines()}
    assert completions == {"//pipe:a", "//pipe:b", "//pipe:c", "//pipe:other", "//pipe:all"}


def test_cache_verify_finds_a_modified_output_and_it_is_rebuilt(ws, capsys):
    assert run(["//pipe:b"], capsys)[0] == 0
    calls(ws)
    code, out, _ = run(["cache", "verify", "//pipe:b"], capsys)
    assert code == 0, out
    b_dir = next((ws / "out" / "pipe").glob("b-*"))
    (b_dir / "out.txt").write_text("tampered")
    code, out, _ = run(["cache", "verify", "//pipe:b"], capsys)
    assert code == 1 and "damaged" in out and "the next build reruns it" in out
    assert run(["//pipe:b"], capsys)[0] == 0
    assert calls(ws) == ["b"]
    assert (b_dir / "out.txt").read_text() == "data-a+A+B"


def test_cli_spares_the_exit_collection():
    """The CLI freezes what is alive at exit, so the interpreter's last collection has nothing to scan."""
    code = (
        "import atexit, gc, os\n"
        "atexit.register(lambda: os.write(1, f'at exit {gc.get_freeze_count() > 0}'.encode()))\n"
        "from marinbuild.cli import main\n"
        "main(['--help'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.endswith("at exit True")
