"""An incremental build touches only what it runs; the run info JSON survives a writer killed mid-write.

Both through real processes: the CLI as a user runs it, and a writer process killed with SIGKILL at a moment
seen from the file system (its temporary file growing) or at the fault point just before its rename.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pipelines as pl
import pytest
from workspaces import write_workspace

from marinbuild.executor import Executor
from marinbuild.store import status

REPO = Path(__file__).resolve().parent.parent

STEPS_PY = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(str(config["salt"]))
"""


def _build_file(salt: int) -> str:
    """Three layers of three targets, each depending on every target of the layer below; ``m1`` has ``salt``."""
    lines = ['load("@marinbuild//rules:python.py", "python_step")']
    for layer, name in enumerate("lmn"):
        for i in range(3):
            deps = [f":{'lmn'[layer - 1]}{j}" for j in range(3)] if layer else []
            value = salt if f"{name}{i}" == "m1" else 0
            lines.append(
                f'python_step(name = "{name}{i}", fn = "steps:write", config = {{"salt": {value}}}, '
                f"deps = {deps!r})".replace("'", '"')
            )
    return "\n".join(lines) + "\n"


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("MARIN_PREFIX", None)
    return env


def _build(ws: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "//..."], cwd=ws, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


def _files(prefix: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``prefix``: ``relative path -> (inode, mtime_ns, size)``."""
    found = {}
    for path in prefix.rglob("*"):
        if path.is_file():
            st = path.stat()
            found[str(path.relative_to(prefix))] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return found


def test_an_incremental_build_rewrites_no_file_of_a_step_it_did_not_run(tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"steps.py": STEPS_PY, "g/BUILD.marin": _build_file(1)}, prefix="../out")
    prefix = tmp_path / "out"
    _build(ws)
    before = _files(prefix)
    time.sleep(0.01)  # a rewrite within the same clock tick would keep the mtime: the inode shows it anyway
    (ws / "g" / "BUILD.marin").write_text(_build_file(2))
    _build(ws)
    after = _files(prefix)

    changed = sorted(path for path, sig in before.items() if after.get(path) != sig)
    assert changed == [], f"an incremental build rewrote or removed files it did not need to: {changed}"
    new_folders = {
        Path(path).parts[0] + "/" + Path(path).parts[1]
        for path in after.keys() - before.keys()
        if not path.startswith("experiments/")
    }
    # m1 and the three n targets above it ran again, in new folders (their versions changed); nothing else did.
    assert sorted(folder.split("/")[1].rsplit("-", 1)[0] for folder in new_folders) == ["m1", "n0", "n1", "n2"]
    run_infos = sorted(path for path in after if path.startswith("experiments/"))
    assert len(run_infos) == 2  # the first run's, untouched, and this run's
    for path in run_infos:
        steps = json.loads((prefix / path).read_text())["steps"]
        assert len(steps) == 9


WRITER = textwrap.dedent("""
    import sys
    from marinbuild.store import run_info

    base, created, steps, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    head = {"worker_id": "w", "git_commit": None, "caller_path": "x.py", "created_date": created, "user": "u",
            "prefix": base}
    version = b'{"big": "' + b"v" * size + b'"}'
    entries = ((b'{"name": "s%d", "version": ' % i, version, b"}") for i in range(steps))
    print(run_info.write(base, "x", head, entries, only_if_new=False))
""")


def _write(base: Path, created: str, steps: int, size: int, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(base), created, str(steps), str(size)],
        env={**_env(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _only_run_info(base: Path) -> dict[str, object]:
    infos = [p for p in base.iterdir() if not p.name.startswith(".tmp-")]
    assert len(infos) == 1, infos
    return json.loads(infos[0].read_text())


def test_a_run_info_writer_killed_during_a_large_write_leaves_the_previous_file_whole(tmp_path: Path) -> None:
    base = tmp_path / "experiments"
    first = _write(base, "first", steps=4, size=1 << 20)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    path = Path(out.strip())
    assert json.loads(path.read_text())["created_date"] == "first"

    # The same steps again (the same name), 1 GB of them: killed once its temporary file has grown past 16 MB.
    second = _write(base, "second", steps=1024, size=1 << 20)
    try:
        while True:
            assert second.poll() is None, "the writer ended before it could be killed mid-write"
            tmp = [p for p in base.iterdir() if p.name.startswith(".tmp-")]
            if tmp and tmp[0].stat().st_size > 16 << 20:
                break
            time.sleep(0.001)
        second.send_signal(signal.SIGKILL)
    finally:
        second.wait(timeout=60)
    assert second.returncode == -signal.SIGKILL
    assert _only_run_info(base)["created_date"] == "first"
    assert len(json.loads(path.read_text())["steps"]) == 4


def test_a_run_info_writer_killed_just_before_its_rename_leaves_the_previous_file(tmp_path: Path) -> None:
    base = tmp_path / "experiments"
    log = tmp_path / "points.log"
    done = _write(base, "first", steps=3, size=1000, MARINBUILD_FAULT_POINT_LOG=str(log))
    out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    points = log.read_text().splitlines()
    assert points[-1] == "before-replace run info x"

    killed = _write(base, "second", steps=3, size=1000, MARINBUILD_KILL_AT_POINT=str(len(points)))
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert _only_run_info(base)["created_date"] == "first"

    again = _write(base, "third", steps=3, size=1000)
    again.communicate(timeout=120)
    assert again.returncode == 0
    assert _only_run_info(base)["created_date"] == "third"


def test_a_run_info_that_cannot_be_written_fails_the_run_its_steps_still_commit(tmp_path: Path) -> None:
    """The run info is written beside the steps, not before them: its error is the run's, once they are done."""
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "experiments").write_text("a file where the run infos' folder should be\n")
    a = pl.step("demo/a", "hello")
    executor = Executor(prefix=str(prefix), executor_info_base_path=str(prefix / "experiments"), listeners=[])
    with pytest.raises(OSError):
        executor.run([a])
    assert status.read_status(executor.output_paths[a]) == status.STATUS_SUCCESS


def test_a_cli_build_whose_run_info_cannot_be_written_fails_after_committing_its_steps(tmp_path: Path) -> None:
    """The run info is written beside the steps: its error fails the command once they are all committed."""
    ws = write_workspace(tmp_path / "ws", {"steps.py": STEPS_PY, "g/BUILD.marin": _build_file(1)}, prefix="../out")
    prefix = tmp_path / "out"
    prefix.mkdir()
    (prefix / "experiments").write_text("a file where the run infos' folder should be\n")
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "//..."], cwd=ws, env=_env(), capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0
    assert "experiments" in done.stderr
    statuses = [status.read_status(str(path.parent)) for path in prefix.glob("g/*/.executor_status")]
    assert statuses == [status.STATUS_SUCCESS] * 9


def test_the_run_info_holds_a_built_steps_current_unversioned_config(tmp_path: Path) -> None:
    """A step not run (built, its version unchanged) still has its config of this run in the run info, unversioned
    fields too: nothing of an earlier run's text may stand in for it."""
    prefix = tmp_path / "prefix"
    base = str(prefix / "experiments")
    first = Executor(prefix=str(prefix), executor_info_base_path=base, listeners=[])
    first.run([pl.step("demo/a", "a", note="first"), pl.step("demo/b", "b1")])
    second = Executor(prefix=str(prefix), executor_info_base_path=base, listeners=[])
    a, b = pl.step("demo/a", "a", note="second"), pl.step("demo/b", "b2")
    second.run([a, b])
    assert second.output_paths[a] == first.output_paths[next(s for s in first.steps if s.name == "demo/a")]
    assert second.executor_info_path is not None and second.executor_info_path != first.executor_info_path
    steps = {s["name"]: s for s in json.loads(Path(second.executor_info_path).read_text())["steps"]}
    assert steps["demo/a"]["config"]["note"] == "second"
