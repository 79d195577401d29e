"""What a build says agrees with what it did, through the real CLI in a child process: one verdict for a build
refused because a step failed before (advice in the CLI's spelling); ``--explain`` gives ``why``'s reason before
the run; ``--run_only`` leaves the summary's other targets in their real state; a refused build ends its event log
saying so, and ``serve``'s runs show it refused; no link to a web view that does not run; one run info name
however the CLI is started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import CliWorkspace, write_workspace

from marinbuild.serve import history
from marinbuild.store.run_info import script_name

STEPS = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(str(config["x"]))


def boom(config):
    raise RuntimeError("boom")
"""

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "message_steps:write", config = {"x": 1})
python_step(name = "b", fn = "message_steps:boom", config = {"x": 1}, deps = [":a"])
python_step(name = "c", fn = "message_steps:write", config = {"x": 3}, deps = [":a"])
"""


@pytest.fixture
def ws(tmp_path: Path) -> CliWorkspace:
    root = write_workspace(tmp_path / "ws", {"message_steps.py": STEPS, "pipe/BUILD.marin": BUILD})
    return CliWorkspace(root, env={"MARINBUILD_SERVE_URL": ""}, events_dir=tmp_path)


def command(ws: CliWorkspace, *args: str) -> subprocess.CompletedProcess[str]:
    """``marinbuild ARGS`` (not a build: no event file) in the workspace."""
    return subprocess.run(ws.command(*args), cwd=ws.root, env=ws.env(), capture_output=True, text=True, timeout=300)


def event_logs(ws: CliWorkspace) -> list[dict]:
    """The summaries of the workspace's recorded builds, newest first (what ``serve``'s runs page shows)."""
    return history.builds(ws.root / ".marinbuild", str(ws.root / "out"))


def test_a_build_refused_for_a_step_that_failed_before_has_one_verdict(ws: CliWorkspace) -> None:
    assert ws.build("//pipe:b").code == 1
    refused = ws.build("--no-force_run_failed", "//pipe:b")
    assert refused.code == 1
    assert "Build OK" not in refused.stdout
    assert refused.stdout.splitlines()[0] == "Build REFUSED, nothing ran: 1 already built, 1 failed before"
    assert "(not built: failed before)" in refused.stdout
    assert "--force_run_failed" in refused.stderr and "force_run_failed=True" not in refused.stderr
    assert refused.ran == set()
    (latest, _first) = event_logs(ws)
    assert latest["refused"].startswith("step(s) failed previously: pipe/b") and latest["finished"]
    assert "--force_run_failed" in latest["refused"]


def test_explain_prints_why_before_the_run(ws: CliWorkspace) -> None:
    assert ws.build("//pipe:a").code == 0
    build_file = ws.root / "pipe" / "BUILD.marin"
    build_file.write_text(build_file.read_text().replace('config = {"x": 1})', 'config = {"x": 2})', 1))
    why = command(ws, "why", "//pipe:a")
    assert "config.attrs.config.x: 1 -> 2" in why.stdout
    explained = ws.build("--explain", "//pipe:a")
    assert explained.code == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert lines[0].startswith("missing    pipe/a")
    assert lines[1] == "           why: version changed: config.attrs.config.x: 1 -> 2"
    assert lines[2].startswith("Build OK")  # the plan came first, then the run's summary


def test_run_only_keeps_the_other_targets_state(ws: CliWorkspace) -> None:
    assert ws.build("//pipe:a", "//pipe:c").code == 0
    narrowed = ws.build("--run_only", "c", "//pipe:a", "//pipe:c")
    assert narrowed.code == 0, narrowed.stderr
    assert "(not built" not in narrowed.stdout, narrowed.stdout
    build_file = ws.root / "pipe" / "BUILD.marin"
    build_file.write_text(build_file.read_text().replace('config = {"x": 1})', 'config = {"x": 9})', 1))
    other = ws.build("--run_only", "pipe/b", "//pipe:a", "//pipe:c")
    targets = {line.split()[0]: line for line in other.stdout.splitlines() if line.startswith("//")}
    assert "(not built: not selected by --run_only)" in targets["//pipe:c"]


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("//pipe:nothere",), "no such target '//pipe:nothere'"),
        (("--rebuild", "//pipe:b", "//pipe:a"), "--rebuild //pipe:b: //pipe:b is not built by this command"),
    ],
)
def test_a_build_refused_at_analysis_says_so_in_its_event_log(
    ws: CliWorkspace, args: tuple[str, ...], reason: str
) -> None:
    refused = ws.build(*args)
    assert refused.code == 2
    (log,) = event_logs(ws)
    assert log["refused"] is not None and log["refused"].startswith(reason) and log["finished"]


def test_a_bad_build_file_is_a_refused_build(ws: CliWorkspace) -> None:
    (ws.root / "pipe" / "BUILD.marin").write_text("python_step(\n")
    assert ws.build("//pipe:a").code == 2
    (log,) = event_logs(ws)
    assert log["refused"] is not None and "BUILD.marin" in log["refused"]


def test_no_experiment_page_without_a_web_view(ws: CliWorkspace) -> None:
    done = ws.build("//pipe:a")
    assert done.code == 0, done.stderr
    assert "experiment page" not in done.stderr and "localhost:5000" not in done.stderr
    (run_info,) = (ws.root / "out" / "experiments").glob("*.json")
    assert f"marinbuild: run info: {run_info} (marinbuild serve shows its page)" in done.stderr
    ws.extra_env["MARINBUILD_SERVE_URL"] = "http://views.example.org"
    ws.build("--rebuild", "//pipe:a", "//pipe:a")
    configured = ws.build("--rebuild", "//pipe:a", "//pipe:a")
    assert "marinbuild: experiment page: http://views.example.org/experiment?path=" in configured.stderr


def test_the_run_info_is_named_after_the_command_however_it_starts(ws: CliWorkspace) -> None:
    assert ws.build("//pipe:a").code == 0  # python -m marinbuild
    (run_info,) = (ws.root / "out" / "experiments").glob("*.json")
    assert run_info.name.startswith("marinbuild-")
    assert json.loads(run_info.read_text())["caller_path"].endswith("__main__.py")  # Marin's record, as it is
    assert script_name("/venv/bin/marinbuild") == script_name("/site/marinbuild/__main__.py") == "marinbuild"
    assert script_name("/ws/experiments/train.py") == "train"


def test_cache_verify_labels_each_row_with_its_own_target(ws: CliWorkspace) -> None:
    assert ws.build("//pipe:c").code == 0
    verified = command(ws, "cache", "verify", "//pipe:c")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    rows = {line.split()[1]: line for line in verified.stdout.splitlines() if line.startswith("ok")}
    assert set(rows) == {"//pipe:a", "//pipe:c"}
    assert "/out/pipe/a-" in rows["//pipe:a"] and "/out/pipe/c-" in rows["//pipe:c"]


def test_cache_show_names_the_users_function(ws: CliWorkspace) -> None:
    assert ws.build("//pipe:a").code == 0
    shown = command(ws, "cache", "show", "//pipe:a")
    assert shown.returncode == 0, shown.stderr
    assert "  function:  message_steps:write (its config: " in shown.stdout
    assert "run_target" not in shown.stdout


def test_serve_without_its_extra_names_the_install_for_a_clone_too(ws: CliWorkspace) -> None:
    """Without Starlette, ``serve`` says how to install it from a package index and from a clone."""
    code = "import sys; sys.modules['starlette'] = None; from marinbuild.cli import main; sys.exit(main(['serve']))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ws.root, env=ws.env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "pip install 'marinbuild[serve]'" in done.stderr and "pip install -e '.[serve]'" in done.stderr
