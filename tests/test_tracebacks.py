"""A failed step's traceback, through the real CLI (a subprocess, local backend) and a Marin script.

The workspace has a python_step and an executor_script step that both fail with ``KeyError: 'missing_key'``
two frames deep. The whole traceback must be in the step's ``.marinbuild_traceback.txt`` (beside
``.executor_status``), in the build event log's ``failed`` event, and its last frames plus the file's path in
the console summary; ``why`` and ``cache show`` point at the file; once the step succeeds the file is gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from workspaces import write_workspace

REPO = Path(__file__).resolve().parents[1]
TRACEBACK_FILE = ".marinbuild_traceback.txt"

STEPS_PY = """
import os


def lookup(config):
    table = {"present": 1}
    if os.path.exists(config["fixed_flag"]):
        table["missing_key"] = 2
    return helper_of_lookup(table, config["output_path"])


def helper_of_lookup(table, output_path):
    value = table["missing_key"]
    os.makedirs(output_path, exist_ok=True)
    with open(os.path.join(output_path, "value.txt"), "w") as f:
        f.write(str(value))
    return value
"""

SCRIPT_PY = """
import os
from dataclasses import dataclass

from marinbuild.executor import ExecutorStep, executor_main, this_output_path


@dataclass(frozen=True)
class ScriptConfig:
    output_path: str
    fixed_flag: str


def script_step(config: ScriptConfig) -> None:
    settings = {}
    if os.path.exists(config.fixed_flag):
        settings["missing_key"] = "set"
    inner_of_script(settings, config.output_path)


def inner_of_script(settings, output_path):
    os.makedirs(output_path, exist_ok=True)
    with open(os.path.join(output_path, "setting.txt"), "w") as f:
        f.write(settings["missing_key"])


broken = ExecutorStep(name="tb/script_step", fn=script_step,
                      config=ScriptConfig(output_path=this_output_path(), fixed_flag=os.environ["TB_FIXED_FLAG"]))

if __name__ == "__main__":
    executor_main(steps=[broken])
"""

BUILD = """
load("@marinbuild//rules:python.py", "executor_script", "python_step")

python_step(name = "lookup", fn = "steps:lookup", config = {"fixed_flag": "FLAG"})
executor_script(name = "script", script = "script.py")
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    build = BUILD.replace("FLAG", str(tmp_path / "fixed"))
    files = {"steps.py": STEPS_PY, "pipe/script.py": SCRIPT_PY, "pipe/BUILD.marin": build}
    return write_workspace(tmp_path / "ws", files)


def _env(ws: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MARIN_PREFIX", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env["TB_FIXED_FLAG"] = str(ws.parent / "fixed")
    return env


def marinbuild(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=_env(ws), capture_output=True, text=True, timeout=180
    )


def only(pattern: str, root: Path) -> Path:
    (found,) = root.glob(pattern)
    return found


def test_failed_steps_keep_their_traceback_beside_the_status_in_the_event_log_and_the_summary(ws, tmp_path):
    events_file = tmp_path / "events.jsonl"
    done = marinbuild(ws, "-k", "--build_event_json_file", str(events_file), "//pipe:all")
    assert done.returncode == 1, done.stderr
    lookup = only("out/pipe/lookup-*", ws)
    script = only("out/tb/script_step-*", ws)
    frames = {
        lookup: ("helper_of_lookup", 'value = table["missing_key"]'),
        script: ("inner_of_script", 'f.write(settings["missing_key"])'),
    }

    for out, (function, line) in frames.items():
        assert (out / ".executor_status").read_text().strip() == "FAILED"
        text = (out / TRACEBACK_FILE).read_text()
        assert text.startswith("Traceback (most recent call last):")
        assert f"in {function}" in text and line in text
        assert text.rstrip().endswith("KeyError: 'missing_key'")

    failed = [json.loads(line) for line in events_file.read_text().splitlines()]
    failed = {e["output_path"]: e for e in failed if e["kind"] == "failed"}
    assert set(failed) == {str(lookup), str(script)}
    for out in frames:
        event = failed[str(out)]
        assert event["traceback"] == (out / TRACEBACK_FILE).read_text().rstrip("\n")
        assert event["traceback_file"] == str(out / TRACEBACK_FILE)

    console = done.stdout
    for out, (function, line) in frames.items():
        assert f"in {function}" in console and line in console  # the last frames
        assert f"full traceback: {out / TRACEBACK_FILE}" in console
    assert "_python_step_impl" not in console  # not the whole traceback: rules/python.py's frame is above the last two
    assert f"traceback: {lookup / TRACEBACK_FILE}" in done.stderr  # the final error line leads there too

    why = marinbuild(ws, "why", "//pipe:lookup")
    assert f"traceback: {lookup / TRACEBACK_FILE}" in why.stdout, why.stderr
    show = marinbuild(ws, "cache", "show", "//pipe:script")
    assert f"traceback: {script / TRACEBACK_FILE}" in show.stdout, show.stderr
    refused = marinbuild(ws, "--no-force_run_failed", "//pipe:lookup")
    assert refused.returncode == 1 and f"(FAILED; traceback: {lookup / TRACEBACK_FILE})" in refused.stderr

    (tmp_path / "fixed").write_text("")  # the steps now succeed, at the same output paths
    fixed = marinbuild(ws, "//pipe:all")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    for out in frames:
        assert (out / ".executor_status").read_text().strip() == "SUCCESS"
        assert not (out / TRACEBACK_FILE).exists()  # a SUCCESS output carries no stale traceback
    verify = marinbuild(ws, "cache", "verify", "//pipe:all")
    assert verify.returncode == 0 and "2 ok, 0 damaged" in verify.stdout, verify.stdout + verify.stderr


def test_a_marin_script_names_the_traceback_file_in_its_error(ws, tmp_path):
    prefix = tmp_path / "script_prefix"
    done = subprocess.run(
        [sys.executable, str(ws / "pipe" / "script.py"), "--prefix", str(prefix)],
        cwd=ws,
        env=_env(ws),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode != 0
    out = only("tb/script_step-*", prefix)
    assert (out / TRACEBACK_FILE).read_text().rstrip().endswith("KeyError: 'missing_key'")
    last = done.stderr.rstrip().splitlines()[-1]
    assert last.startswith("marinbuild.engine.errors.StepFailedError: 1 step(s) failed: tb/script_step")
    assert f"traceback: {out / TRACEBACK_FILE}" in last
    assert "in inner_of_script" in done.stderr  # the chained cause: the step's own frames


RUNNER_B_WAITS = threading.Event()


def fail_once_the_other_runner_waits(config: Any) -> None:
    assert RUNNER_B_WAITS.wait(60), "the second runner never waited"
    raise KeyError("missing_key")


def test_a_build_that_waited_for_a_step_failing_in_another_runner_names_its_traceback(prefix):
    from marinbuild.executor import Executor, ExecutorStep, StepFailedError, this_output_path
    from marinbuild.run import events as ev

    def step() -> ExecutorStep:
        return ExecutorStep(
            name="tb/shared", fn=fail_once_the_other_runner_waits, config={"output_path": this_output_path()}
        )

    def waiting(event: ev.Event) -> None:
        if event.kind == ev.WAITING:
            RUNNER_B_WAITS.set()

    a = Executor(prefix=prefix, executor_info_base_path=prefix + "/experiments", listeners=[])
    b = Executor(prefix=prefix, executor_info_base_path=prefix + "/experiments", listeners=[waiting])
    errors: dict[str, BaseException] = {}

    def build(name: str, executor: Executor) -> None:
        try:
            executor.run([step()])
        except StepFailedError as exc:
            errors[name] = exc

    runner_a = threading.Thread(target=build, args=("a", a))
    runner_a.start()
    while not list(Path(prefix).glob("tb/shared-*/.executor_status.lock")):  # runner a holds the lease
        assert runner_a.is_alive()
        time.sleep(0.01)
    build("b", b)
    runner_a.join(60)
    (out,) = Path(prefix).glob("tb/shared-*")
    assert "KeyError: 'missing_key'" in (out / TRACEBACK_FILE).read_text()
    assert f"(traceback: {out / TRACEBACK_FILE})" in str(errors["a"])
    (waited,) = errors["b"].failures.values()
    assert "while this build waited for it" in str(waited) and f"its traceback: {out / TRACEBACK_FILE}" in str(waited)
