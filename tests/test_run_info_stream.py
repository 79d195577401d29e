"""The run info JSON (``store/run_info.py``): its text and name, checked against a plain composition with the
standard library's ``json`` and ``hashlib``; its atomic replacement (a kill leaves the earlier file whole); and when
a run writes it (before its steps start, with every step's record of this run).
"""

from __future__ import annotations

import dataclasses
import hashlib
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

from marinbuild.core.jsonenc import MarinJsonEncoder, dumps_sorted
from marinbuild.engine.infos import ExecutorStepInfo
from marinbuild.executor import Executor
from marinbuild.store import run_info, status

REPO = Path(__file__).resolve().parent.parent

HEAD = {
    "worker_id": "w-1",
    "git_commit": None,
    "caller_path": "/x/exp.py",
    "created_date": "2026-01-02T03:04:05.000006",
    "user": "u",
    "prefix": "/p",
}


def _steps(count: int) -> list[dict[str, object]]:
    """Steps of very different sizes: some big, some tiny."""
    return [
        {"name": f"s{i}", "version": {"blob": "v" * (i * 37 % 900), "i": i}, "deps": [f"/p/s{i - 1}"]}
        for i in range(count)
    ]


@pytest.mark.parametrize("count", [0, 1, 300])
def test_the_run_info_is_the_plain_composition(tmp_path: Path, count: int) -> None:
    """The top level indented as Marin's, each step one line of compact sorted-key JSON."""
    steps = _steps(count)
    path = str(tmp_path / "exp-abcdef.json")
    run_info.write(path, {**HEAD, "extra": "not written"}, (json.dumps(step, sort_keys=True) for step in steps))
    text = Path(path).read_text()
    assert json.loads(text) == {**HEAD, "steps": steps}
    assert text.startswith(json.dumps(HEAD, indent=2)[:-2] + ',\n  "steps": [')
    lines = text.splitlines()
    assert lines[len(HEAD) + 2 : len(HEAD) + 2 + count] == [
        "    " + json.dumps(step, sort_keys=True) + ("," if i < count - 1 else "") for i, step in enumerate(steps)
    ]
    assert os.listdir(tmp_path) == ["exp-abcdef.json"]


def test_a_step_line_is_marins_sorted_dump_of_the_step_info() -> None:
    version = {"name": "a", "config": {"x": [1, 2.5, None], "é": "ü"}, "dependencies": [{"name": "b"}]}
    info = ExecutorStepInfo(
        name="a",
        fn_name="m.f",
        config={"path": "/p/a-123456", "n": 3},
        description="left out",
        override_output_path=None,
        version=version,
        dependencies=["/p/b-654321"],
        output_path="/p/a-123456",
    )
    fields = dataclasses.asdict(info)
    fields.pop("description")
    expected = json.dumps(fields, sort_keys=True, cls=MarinJsonEncoder)
    assert run_info.step_line(info, dumps_sorted(version)) == expected


def test_the_name_is_the_md5_of_the_sorted_output_paths_under_the_prefix() -> None:
    paths = ["/p/b-222222", "/p/a-111111", "/elsewhere/c-333333"]
    expected = hashlib.md5(b"/elsewhere/c-333333\na-111111\nb-222222").hexdigest()[:6]
    assert run_info.name("exp", paths, "/p") == f"exp-{expected}.json"
    assert run_info.name("exp", reversed(paths), "/p/") == run_info.name("exp", paths, "/p")
    assert run_info.name("exp", paths[:2], "/p") != run_info.name("exp", paths, "/p")
    moved = ["gs://b/q/b-222222", "gs://b/q/a-111111", "/elsewhere/c-333333"]
    assert run_info.name("exp", moved, "gs://b/q") == run_info.name("exp", paths, "/p")  # the same graph elsewhere
    assert run_info.script_name("/x/y/train.py") == "train"


WRITER = textwrap.dedent("""
    import sys
    from marinbuild.store import run_info

    path, created, steps, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    head = {"worker_id": "w", "git_commit": None, "caller_path": "x.py", "created_date": created, "user": "u",
            "prefix": "/p"}
    version = '{"big": "' + "v" * size + '"}'
    run_info.write(path, head, ('{"name": "s%d", "version": %s}' % (i, version) for i in range(steps)))
""")


def _write(path: Path, created: str, steps: int, size: int, **env: str) -> subprocess.Popen[str]:
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]), **env}
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), created, str(steps), str(size)],
        env=environ,
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
    path = base / "x-abcdef.json"
    first = _write(path, "first", steps=4, size=1 << 20)
    _out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert json.loads(path.read_text())["created_date"] == "first"

    # The same name again, 1 GB of steps: killed once its temporary file has grown past 16 MB.
    second = _write(path, "second", steps=1024, size=1 << 20)
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
    path = base / "x-abcdef.json"
    log = tmp_path / "points.log"
    done = _write(path, "first", steps=3, size=1000, MARINBUILD_FAULT_POINT_LOG=str(log))
    _out, err = done.communicate(timeout=120)
    assert done.returncode == 0, err
    points = log.read_text().splitlines()
    assert points[-1] == "before-replace experiments/x-abcdef.json"

    killed = _write(path, "second", steps=3, size=1000, MARINBUILD_KILL_AT_POINT=str(len(points)))
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert _only_run_info(base)["created_date"] == "first"

    again = _write(path, "third", steps=3, size=1000)
    again.communicate(timeout=120)
    assert again.returncode == 0
    assert _only_run_info(base)["created_date"] == "third"


def test_a_run_info_that_cannot_be_written_fails_the_run_before_any_step_starts(tmp_path: Path) -> None:
    """As Marin: the run info is written before the steps start, so its error stops the run."""
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "experiments").write_text("a file where the run infos' folder should be\n")
    a = pl.step("demo/a", "hello")
    executor = Executor(prefix=str(prefix), executor_info_base_path=str(prefix / "experiments"), listeners=[])
    with pytest.raises(OSError):
        executor.run([a])
    assert status.read_status(executor.output_paths[a]) is None


def test_a_run_of_the_same_graph_replaces_the_run_info_with_its_own(tmp_path: Path) -> None:
    """The name follows the graph's output paths; the file is the last run's record."""
    prefix, base = tmp_path / "prefix", str(tmp_path / "prefix" / "experiments")
    first = Executor(prefix=str(prefix), executor_info_base_path=base, listeners=[])
    a = pl.step("demo/a", "a")
    first.run([a])
    second = Executor(prefix=str(prefix), executor_info_base_path=base, listeners=[])
    again = pl.step("demo/a", "a")
    second.run([again], rebuild=[again])
    assert second.executor_info_path == first.executor_info_path
    assert os.listdir(base) == [os.path.basename(second.executor_info_path)]
    assert json.loads(Path(second.executor_info_path).read_text())["worker_id"] == second.worker_id != first.worker_id


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
