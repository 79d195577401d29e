"""Code changes through the real CLI in a subprocess: python_step's module file is part of its key (unless
``code_in_key = False``); elsewhere (an opted-out python_step, a Marin script's step) the output stays, and
why, cache status and the build summary say the code changed; ``--rebuild`` rebuilds on purpose; a wrong
``fn`` is an analysis error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from workspaces import write_workspace

STEPS = """
import os


def write(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["name"] + "\\n")
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(config["name"])
"""

SCRIPT = """
import os
from dataclasses import dataclass

from marinbuild.executor import ExecutorStep, this_output_path, versioned


@dataclass(frozen=True)
class C:
    output_path: str
    v: int


def touch(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write("script\\n")
    os.makedirs(config.output_path, exist_ok=True)


only = ExecutorStep(name="script/only", fn=touch, config=C(output_path=this_output_path(), v=versioned(1)))
"""

BUILD = """
load("@marinbuild//rules:python.py", "executor_script", "python_step")

python_step(name = "keyed", fn = "steps:write", config = {"name": "keyed"})
python_step(name = "loose", fn = "steps:write", config = {"name": "loose"}, code_in_key = False)
executor_script(name = "script", script = "script.py")
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "calls.log").touch()
    return write_workspace(tmp_path / "ws", {"steps.py": STEPS, "pipe/script.py": SCRIPT, "pipe/BUILD.marin": BUILD})


def mb(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    env["MB_CALLS"] = str(ws.parent / "calls.log")
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=120
    )


def calls(ws: Path) -> list[str]:
    log = ws.parent / "calls.log"
    names = sorted(log.read_text().split())
    log.write_text("")
    return names


def edit(path: Path) -> None:
    path.write_text(path.read_text() + "\n# a comment\n")


ALL = ("//pipe:keyed", "//pipe:loose", "//pipe:script")
SENTENCE = "code changed since this output was built: "


def test_each_build_records_the_code_its_steps_ran(ws: Path) -> None:
    assert mb(ws, *ALL).returncode == 0
    records = {
        p.parent.name.rsplit("-", 1)[0]: json.loads(p.read_text())["files"]
        for p in (ws / "out").rglob(".marinbuild_code.json")
    }
    assert set(records) == {"keyed", "loose", "only"}
    assert "steps.py" in records["keyed"] and "steps.py" in records["loose"]
    assert any(path.endswith("rules/python.py") for path in records["keyed"])  # the rule's module
    assert set(records["only"]) == {"pipe/script.py"}  # a script step: the file defining its fn


def test_python_step_code_is_in_its_key_by_default(ws: Path) -> None:
    assert mb(ws, *ALL).returncode == 0
    assert calls(ws) == ["keyed", "loose", "script"]
    edit(ws / "steps.py")
    why = mb(ws, "why", "//pipe:keyed")
    assert "would run: version changed" in why.stdout and "config.code.fn.xxh3" in why.stdout
    done = mb(ws, *ALL)
    assert done.returncode == 0, done.stderr
    assert calls(ws) == ["keyed"]


def test_code_outside_the_key_is_reported_not_rebuilt(ws: Path) -> None:
    assert mb(ws, *ALL).returncode == 0
    calls(ws)
    edit(ws / "steps.py")
    edit(ws / "pipe" / "script.py")
    done = mb(ws, *ALL)
    assert done.returncode == 0, done.stderr
    assert calls(ws) == ["keyed"]
    warnings = [line for line in done.stderr.splitlines() if "warning: code changed" in line]
    assert len(warnings) == 1
    assert "2 output(s)" in warnings[0] and "pipe/script.py, steps.py" in warnings[0]
    loose = mb(ws, "why", "//pipe:loose")
    assert "up to date" in loose.stdout and SENTENCE + "steps.py" in loose.stdout
    script = mb(ws, "why", "//pipe:script")
    assert SENTENCE + "pipe/script.py" in script.stdout
    status = mb(ws, "cache", "status", *ALL)
    assert f"//pipe:loose: {SENTENCE}steps.py" in status.stdout
    assert f"//pipe:script: {SENTENCE}pipe/script.py" in status.stdout
    assert "//pipe:keyed:" not in status.stdout
    rebuilt = mb(ws, "--rebuild", "//pipe:loose", *ALL)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert calls(ws) == ["loose"]
    assert SENTENCE not in mb(ws, "why", "//pipe:loose").stdout
    assert "1 output(s)" in mb(ws, *ALL).stderr


def test_a_dry_run_reads_statuses_only_and_says_nothing_of_code(ws: Path) -> None:
    """A dry run does not check code records (it says what would run); the build after it does."""
    assert mb(ws, *ALL).returncode == 0
    calls(ws)
    edit(ws / "steps.py")
    dry = mb(ws, "-n", *ALL)
    assert dry.returncode == 0, dry.stderr
    assert "code changed" not in dry.stderr + dry.stdout
    assert [line.split()[1] for line in dry.stdout.splitlines() if line.startswith(("missing", "stale"))] == [
        "pipe/keyed"
    ]
    assert calls(ws) == []
    done = mb(ws, *ALL)
    assert done.returncode == 0 and "warning: code changed since 1 output(s)" in done.stderr, done.stderr


def test_opting_out_keeps_the_key_of_a_step_without_the_attribute(ws: Path) -> None:
    """code_in_key = False gives the version python_step had before code was part of keys (configs only)."""
    dry = mb(ws, "-n", "//pipe:loose", "//pipe:keyed")
    paths = dict(line.split()[1:3] for line in dry.stdout.splitlines() if line.startswith("missing"))
    build = ws / "pipe" / "BUILD.marin"
    build.write_text(build.read_text().replace(", code_in_key = False", ""))
    again = mb(ws, "-n", "//pipe:loose")
    assert again.returncode == 0
    assert paths["pipe/loose"] not in again.stdout  # the attribute, not the name, decides the key
    assert paths["pipe/loose"].rsplit("-", 1)[1] != paths["pipe/keyed"].rsplit("-", 1)[1]


def test_a_wrong_fn_is_an_analysis_error(ws: Path) -> None:
    (ws / "pipe" / "steps_here.py").write_text(STEPS)
    (ws / "pipe" / "BUILD.marin").write_text(
        textwrap.dedent("""
        load("@marinbuild//rules:python.py", "python_step")
        python_step(name = "x", fn = "steps_here:write", config = {"name": "x"})
        python_step(name = "y", fn = "steps:make", config = {"name": "y"})
    """)
    )
    wrong_module = mb(ws, "//pipe:x")
    assert wrong_module.returncode == 2
    assert wrong_module.stderr.count("\n") == 1 and "Traceback" not in wrong_module.stderr
    assert "pipe/BUILD.marin:3:1" in wrong_module.stderr
    assert "the module named by its import path from the workspace root" in wrong_module.stderr
    assert "did you mean 'pipe.steps_here:write'?" in wrong_module.stderr
    wrong_name = mb(ws, "//pipe:y")
    assert wrong_name.returncode == 2 and "defines no top-level 'make'" in wrong_name.stderr
    assert calls(ws) == [] and not (ws / "out").exists()


def test_each_fn_of_one_module_is_checked(ws: Path) -> None:
    """Targets naming the same module share its lookup in one analysis, not the check of their own function."""
    (ws / "pipe" / "BUILD.marin").write_text(
        textwrap.dedent("""
        load("@marinbuild//rules:python.py", "python_step")
        python_step(name = "a", fn = "steps:write", config = {"name": "a"})
        python_step(name = "b", fn = "steps:missing", config = {"name": "b"})
    """)
    )
    wrong = mb(ws, "//pipe:a", "//pipe:b")
    assert wrong.returncode == 2 and "fn 'steps:missing'" in wrong.stderr and "defines no top-level" in wrong.stderr
    assert mb(ws, "//pipe:a").returncode == 0 and calls(ws) == ["a"]


def test_an_installed_module_fn_is_found_outside_the_workspace(ws: Path) -> None:
    (ws / "pipe" / "BUILD.marin").write_text(
        textwrap.dedent("""
        load("@marinbuild//rules:python.py", "python_step")
        python_step(name = "a", fn = "json:dumps", config = {"name": "a"})
        python_step(name = "b", fn = "json:dumps", config = {"name": "b"})
        python_step(name = "c", fn = "json:nothing_here", config = {"name": "c"})
    """)
    )
    dry = mb(ws, "-n", "//pipe:a", "//pipe:b")
    assert dry.returncode == 0, dry.stderr
    wrong = mb(ws, "-n", "//pipe:c")
    assert wrong.returncode == 2 and "defines no top-level 'nothing_here'" in wrong.stderr


def test_executor_main_and_the_cli_write_the_same_code_record_for_the_same_step(ws: Path) -> None:
    """The script's step built by ``python pipe/script.py`` (Marin's face) and by the CLI (its ``executor_script``
    target), each into a prefix of its own: the same output folder name and the same record of its code."""
    script = ws / "pipe" / "script.py"
    script.write_text(script.read_text() + "\nif __name__ == '__main__':\n    executor_main(steps=[only])\n")
    script.write_text(script.read_text().replace("import ExecutorStep,", "import ExecutorStep, executor_main,"))
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    env["MB_CALLS"] = str(ws.parent / "calls.log")
    marin = subprocess.run(
        [sys.executable, "pipe/script.py", "--prefix", str(ws / "marin")],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert marin.returncode == 0, marin.stderr
    assert mb(ws, "--prefix", str(ws / "cli"), "//pipe:script").returncode == 0

    def record(prefix: str) -> tuple[str, dict[str, str]]:
        (path,) = (ws / prefix).rglob(".marinbuild_code.json")
        return path.parent.name, json.loads(path.read_text())

    assert record("marin") == record("cli")
    assert set(record("marin")[1]["files"]) == {"pipe/script.py"}


TWO_STEP_SCRIPT = """
import os
from dataclasses import dataclass

from marinbuild.executor import ExecutorStep, output_path_of, this_output_path, versioned


@dataclass(frozen=True)
class C:
    output_path: str
    v: int
    source: str | None = None


def touch(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(os.path.basename(config.output_path).rsplit("-", 1)[0] + "\\n")
    os.makedirs(config.output_path, exist_ok=True)


inner = ExecutorStep(name="two/inner", fn=touch, config=C(output_path=this_output_path(), v=versioned(1)))
outer = ExecutorStep(
    name="two/outer", fn=touch, config=C(output_path=this_output_path(), v=versioned(1), source=output_path_of(inner))
)
"""


def test_the_code_warning_names_a_script_inner_step_and_how_to_rebuild_it(ws: Path) -> None:
    """After ``--rebuild`` of an executor_script target, its inner step's code is still stale: the warning names
    that step (no label does) and ``--rebuild STEP`` rebuilds it."""
    (ws / "pipe" / "two.py").write_text(TWO_STEP_SCRIPT)
    with open(ws / "pipe" / "BUILD.marin", "a") as f:
        f.write('executor_script(name = "two", script = "two.py")\n')
    assert mb(ws, "//pipe:two").returncode == 0
    assert calls(ws) == ["inner", "outer"]
    edit(ws / "pipe" / "two.py")
    rebuilt = mb(ws, "--rebuild", "//pipe:two", "//pipe:two")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert calls(ws) == ["outer"]
    assert "  two/inner: pipe/two.py (a step inside a target, no label names it; rebuild: --rebuild two/inner)" in (
        rebuilt.stderr
    )
    inner = mb(ws, "--rebuild", "two/inner", "//pipe:two")
    assert inner.returncode == 0, inner.stderr
    assert calls(ws) == ["inner"]
    assert "code changed" not in mb(ws, "//pipe:two").stderr


def test_the_code_warning_names_a_target_step_with_its_label(ws: Path) -> None:
    assert mb(ws, *ALL).returncode == 0
    edit(ws / "pipe" / "script.py")
    done = mb(ws, *ALL)
    assert (
        "  script/only: pipe/script.py (target //pipe:script: marinbuild why //pipe:script; "
        "rebuild: --rebuild //pipe:script)"
    ) in done.stderr
