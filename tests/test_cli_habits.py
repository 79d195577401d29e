"""The CLI as Bazel and Marin users type it, each through the real ``marinbuild`` in a subprocess:
info, mistyped subcommands, the internal-error exit code, --check_up_to_date, --nokeep_going,
Marin's flag spellings, --rebuild, and shell completion of ``marinbuild //pkg:``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import repository_workspace, write_workspace

STEPS = """
import os


def write(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["name"] + "\\n")
    if config.get("fail"):
        raise RuntimeError("asked to fail")
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(config["name"])
"""

BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "steps:write", config = {"name": "a"})
python_step(name = "b", fn = "steps:write", config = {"name": "b"}, deps = [":a"])
python_step(name = "bad", fn = "steps:write", config = {"name": "bad", "fail": True})
python_step(name = "after_bad", fn = "steps:write", config = {"name": "after_bad"}, deps = [":bad"])
python_step(name = "lone", fn = "steps:write", config = {"name": "lone"})
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "calls.log").touch()
    return write_workspace(tmp_path / "ws", {"steps.py": STEPS, "pipe/BUILD.marin": BUILD})


def env_of(ws: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS")}
    env["MB_CALLS"] = str(ws.parent / "calls.log")
    env.update(extra)
    return env


def mb(ws: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args],
        cwd=ws,
        env=env_of(ws, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


def calls(ws: Path) -> list[str]:
    log = ws.parent / "calls.log"
    names = log.read_text().split()
    log.write_text("")
    return names


def test_info_lists_facts_and_one_key(ws: Path) -> None:
    done = mb(ws, "info")
    assert done.returncode == 0, done.stderr
    facts = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert facts["workspace"] == str(ws)
    assert facts["prefix"] == str(ws / "out")
    assert facts["prefix_source"].startswith("[tool.marinbuild] prefix")
    assert facts["backend"] == "local"
    assert facts["output_base"] == str(ws / ".marinbuild")
    assert "version" in facts
    assert mb(ws, "info", "prefix", MARIN_PREFIX=str(ws / "elsewhere")).stdout == f"{ws / 'elsewhere'}\n"
    assert mb(ws, "info", "prefix_source", MARIN_PREFIX=str(ws / "elsewhere")).stdout == "$MARIN_PREFIX\n"
    assert mb(ws, "info", "prefix_source", "--prefix", "x").stdout == "--prefix\n"
    wrong = mb(ws, "info", "prefx")
    assert wrong.returncode == 2
    assert "did you mean 'prefix'" in wrong.stderr and "Traceback" not in wrong.stderr


def test_mistyped_subcommand_is_suggested(ws: Path) -> None:
    done = mb(ws, "biuld", "//pipe:a")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "marinbuild: error: unknown command 'biuld'; did you mean 'build'? (marinbuild --help lists the commands)"
    )
    assert calls(ws) == []


def test_internal_error_exits_37_and_asks_for_a_report(ws: Path) -> None:
    """A bug inside marinbuild (here: an exception injected where a session opens) is not a usage error."""
    script = (
        "import sys, marinbuild.analysis.session as s\n"
        "def broken(*a, **k):\n    raise KeyError('injected bug')\n"
        "s.Session.open = broken\n"
        "from marinbuild.cli import main\nsys.exit(main(['//pipe:a']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ws, env=env_of(ws), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 37
    assert "Traceback" in done.stderr and "injected bug" in done.stderr
    assert "internal error (a bug in marinbuild" in done.stderr and "please report it" in done.stderr
    (kept,) = (ws / ".marinbuild" / "logs").glob("internal-error-*.txt")  # kept for a report, as stderr may be lost
    assert f"the traceback is kept in {kept}" in done.stderr and "KeyError: 'injected bug'" in kept.read_text()


def test_check_up_to_date(ws: Path) -> None:
    stale = mb(ws, "--check_up_to_date", "//pipe:b")
    assert stale.returncode == 1
    assert "not up to date: 2 step(s) would run: pipe/b, pipe/a" in stale.stderr
    assert calls(ws) == [] and not (ws / "out").exists()
    assert mb(ws, "//pipe:b").returncode == 0
    calls(ws)
    fresh = mb(ws, "--check_up_to_date", "//pipe:b")
    assert fresh.returncode == 0, fresh.stderr
    assert calls(ws) == []


def test_nokeep_going_and_keep_going(ws: Path) -> None:
    stop = mb(ws, "--nokeep_going", "-j", "1", "//pipe:after_bad", "//pipe:lone", "--force_run_failed", "true")
    assert stop.returncode == 1
    ran = calls(ws)
    assert "bad" in ran and "after_bad" not in ran
    import shutil

    shutil.rmtree(ws / "out")
    go = mb(ws, "--keep_going", "-j", "1", "//pipe:after_bad", "//pipe:lone")
    assert go.returncode == 1
    assert "lone" in calls(ws)


def test_marin_flag_spellings(ws: Path) -> None:
    dry = mb(ws, "--dry_run", "true", "//pipe:b")
    assert dry.returncode == 0, dry.stderr
    assert "Dry run" in dry.stdout and calls(ws) == []
    dry_eq = mb(ws, "--dry_run=True", "//pipe:b")
    assert "Dry run" in dry_eq.stdout and calls(ws) == []
    real = mb(ws, "--dry_run", "false", "--max_concurrent", "1", "--run_only", '["pipe/a"]', "//pipe:b")
    assert real.returncode == 0, real.stderr
    assert calls(ws) == ["a"]
    assert mb(ws, "--bad_flag_free_run", "//pipe:b").returncode == 2
    assert mb(ws, "//pipe:bad").returncode == 1
    calls(ws)
    refused = mb(ws, "--force_run_failed", "false", "//pipe:bad")
    assert refused.returncode == 1
    assert "failed previously" in refused.stderr and calls(ws) == []
    wrong = mb(ws, "--run_only", "[oops", "//pipe:b")
    assert wrong.returncode == 2 and "--run_only" in wrong.stderr and "Traceback" not in wrong.stderr


def test_rebuild_runs_a_built_target_again(ws: Path) -> None:
    assert mb(ws, "//pipe:b").returncode == 0
    assert sorted(calls(ws)) == ["a", "b"]
    assert mb(ws, "//pipe:b").returncode == 0
    assert calls(ws) == []
    dry = mb(ws, "-n", "--rebuild", "//pipe:a", "//pipe:b")
    assert "rebuild    pipe/a" in dry.stdout and calls(ws) == []
    done = mb(ws, "--rebuild", "//pipe:a", "//pipe:b")
    assert done.returncode == 0, done.stderr
    assert calls(ws) == ["a"]
    assert mb(ws, "//pipe:b").returncode == 0
    assert calls(ws) == []
    outside = mb(ws, "--rebuild", "//pipe:lone", "//pipe:b")
    assert outside.returncode == 2 and "not built by this command" in outside.stderr


def test_completion_of_a_bare_label(ws: Path) -> None:
    """``marinbuild //pipe:<TAB>`` completes labels, as ``marinbuild build //pipe:<TAB>`` does."""
    env = env_of(ws, COMP_WORDS="marinbuild //pipe:", COMP_CWORD="1", _MARINBUILD_COMPLETE="bash_complete")
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from marinbuild.cli import main; sys.exit(main())"],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    words = [line.split(",", 1)[1] for line in done.stdout.splitlines()]
    assert "//pipe:a" in words and "//pipe:all" in words and "//pipe:lone" in words


def test_query_set_location_and_coloured_graph(ws: Path) -> None:
    assert mb(ws, "//pipe:a").returncode == 0
    union = mb(ws, "query", "set(//pipe:a //pipe:lone)")
    assert union.returncode == 0 and union.stdout == "//pipe:a\n//pipe:lone\n"
    assert mb(ws, "query", "set()").stdout == ""
    where = mb(ws, "query", "--output", "location", "//pipe:b")
    assert where.stdout == "pipe/BUILD.marin:5:1: python_step rule //pipe:b\n"
    dot = mb(ws, "query", "--output", "graph", "deps(//pipe:b)").stdout
    assert '"//pipe:a" [fillcolor=palegreen]' in dot  # built
    assert '"//pipe:b" [fillcolor=lightgray]' in dot  # missing
    assert '"//pipe:b" -> "//pipe:a"' in dot


def test_one_name_per_state(ws: Path) -> None:
    """A step built at another version is 'stale' in a dry run, cache status and query alike."""
    assert mb(ws, "//pipe:a").returncode == 0
    build = ws / "pipe" / "BUILD.marin"
    build.write_text(build.read_text().replace('config = {"name": "a"}', 'config = {"name": "a", "v": 2}'))
    dry = mb(ws, "-n", "//pipe:a", "//pipe:lone")
    assert dry.stdout.splitlines()[0].split()[:2] == ["stale", "pipe/a"]
    assert dry.stdout.splitlines()[1].split()[:2] == ["missing", "pipe/lone"]
    status = mb(ws, "cache", "status", "//pipe:a", "//pipe:lone").stdout
    assert status.splitlines()[1].split()[:2] == ["//pipe:a", "stale"]
    assert status.splitlines()[2].split()[:2] == ["//pipe:lone", "missing"]
    assert mb(ws, "query", "stale(//pipe:all)").stdout == "//pipe:a\n"


TRACKED_RULE = """
import os

from marinbuild.load import attr, rule


def _impl(ctx):
    os.makedirs(ctx.output_path, exist_ok=True)


tracked = rule(implementation=_impl, attrs={"tracker": attr.string(default="json", versioned=False)})
"""


def test_where_to_look_after_a_build(ws: Path) -> None:
    (ws / "rules").mkdir()
    (ws / "rules" / "tracked.py").write_text(TRACKED_RULE)
    (ws / "wb").mkdir()
    (ws / "wb" / "BUILD.marin").write_text(
        'load("//rules:tracked.py", "tracked")\n'
        'tracked(name = "run", tracker = "wandb")\n'
        'tracked(name = "quiet")\n'
        'tracked(name = "tb", tracker = "tensorboard")\n'
    )
    done = mb(
        ws,
        "//wb:run",
        "//wb:quiet",
        "//wb:tb",
        WANDB_ENTITY="team",
        WANDB_PROJECT="proj",
        MARINBUILD_SERVE_URL="http://views.example.org",
    )
    assert done.returncode == 0, done.stderr
    page = [line for line in done.stderr.splitlines() if "experiment page:" in line]
    assert len(page) == 1 and "http://views.example.org/experiment?path=" in page[0]
    run_dir = next((ws / "out" / "wb").glob("run-*")).name
    assert f"marinbuild: W&B run of wb/run: https://wandb.ai/team/proj/runs/{run_dir}" in done.stderr
    assert "wb/quiet" not in done.stderr.split("experiment page:")[1]
    tb_dir = next((ws / "out" / "wb").glob("tb-*"))
    assert f"marinbuild: TensorBoard of wb/tb: tensorboard --logdir {tb_dir / 'tensorboard'}" in done.stderr
    again = mb(ws, "//wb:run", "//wb:quiet", MARINBUILD_SERVE_URL="http://views.example.org")
    assert "experiment page" not in again.stderr  # nothing ran


def test_dry_run_on_the_local_backend_warns_of_a_tpu_step(tmp_path: Path) -> None:
    """``-n //experiments:tootsie_8b``: before the roll's steps, that the local backend cannot run its TPU ones."""
    repo = repository_workspace(tmp_path / "repo")
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "RAY_ADDRESS", "MARINBUILD_BACKEND")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "marinbuild",
            "-n",
            "//experiments:tootsie_8b",
            "--backend",
            "local",
            "--prefix",
            str(tmp_path / "out"),
        ],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    warning = next(i for i, line in enumerate(lines) if "warning: the local backend could not run" in line)
    assert "could not run 14 of the steps below" in lines[warning]
    assert "experiments/tootsie/ocelot needs a TPU v4-2048 slice" in lines[warning]
    assert "--backend ray --ray_address" in lines[warning]
    assert warning < next(i for i, line in enumerate(lines) if line.startswith("missing"))
    assert "Dry run: 131 steps to run" in done.stdout
    assert "doesn't match given override" not in done.stdout  # the BUILD file placed them
