"""Every kind of target builds on a real Ray cluster: from the CLI (a child process) and from a Marin-style script.

The CLI runs as a person runs it, ``python -m marinbuild --backend ray TARGET`` with ``RAY_ADDRESS``
pointing at the session's cluster (the workspace is then shipped as the job's ``working_dir``), or with
no address at all (a private local Ray instance, as on a fresh clone). Steps record the pid they ran
in, so a test sees that they ran in Ray workers and not in the driver.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from raycluster import node_env

from marinbuild.executor import Executor, ExecutorStep, StepFailedError, this_output_path
from marinbuild.run.ray_backend import RayBackend, RemoteTraceback, StepImportError
from marinbuild.store import status as st
from marinbuild.ui.summary import BuildSummary

pytestmark = pytest.mark.timeout(300)

REPO = Path(__file__).resolve().parents[2]

BUILD = """
load("@marinbuild//rules:python.py", "executor_script", "python_step")

executor_script(name = "script", script = "script.py")
python_step(name = "total", fn = "pipe.sums:total", config = {"label": "sum"},
            deps = [":script", "//experiments/tutorials:hello_world"])
"""

SCRIPT = '''
"""A Marin-style script: a step of its own, one from a sibling imported by bare name, a class from the workspace."""
import json
import os
from dataclasses import dataclass

import helper
from pipe.shared import Scale

from marinbuild.executor import ExecutorStep, executor_main, output_path_of, this_output_path, versioned


@dataclass(frozen=True)
class ScaleConfig:
    input_path: str
    scale: Scale
    output_path: str


def scale(config: ScaleConfig) -> dict:
    with open(os.path.join(config.input_path, "numbers.json")) as f:
        numbers = json.load(f)
    return helper.write(config.output_path, [config.scale.apply(n) for n in numbers])


base = ExecutorStep(name="pipe/base", fn=helper.numbers,
                    config=helper.NumbersConfig(n=versioned(4), output_path=this_output_path()))
scaled = ExecutorStep(name="pipe/scaled", fn=scale,
                      config=ScaleConfig(input_path=output_path_of(base), scale=Scale(versioned(3)),
                                         output_path=this_output_path()))

if __name__ == "__main__":
    if os.environ.get("DRIVER_PID_FILE"):
        with open(os.environ["DRIVER_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
    executor_main(steps=[scaled])
'''

HELPER = """
import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class NumbersConfig:
    n: int
    output_path: str


def write(output_path, numbers):
    os.makedirs(output_path, exist_ok=True)
    with open(os.path.join(output_path, "numbers.json"), "w") as f:
        json.dump(numbers, f)
    with open(os.path.join(output_path, "pid"), "w") as f:
        f.write(str(os.getpid()))
    return {"count": len(numbers)}


def numbers(config: NumbersConfig) -> dict:
    return write(config.output_path, list(range(1, config.n + 1)))
"""

SHARED = """
from dataclasses import dataclass


@dataclass(frozen=True)
class Scale:
    factor: int

    def apply(self, n):
        return n * self.factor
"""

SUMS = """
import json
import os


def total(config):
    values = []
    for dep in config["deps"]:
        name = "numbers.json" if os.path.exists(os.path.join(dep, "numbers.json")) else "stats.json"
        with open(os.path.join(dep, name)) as f:
            data = json.load(f)
        values.append(sum(data) if isinstance(data, list) else data["sum"])
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "pid"), "w") as f:
        f.write(str(os.getpid()))
    return {config["label"]: values}
"""


def _tutorial(root: Path) -> None:
    """The hello_world tutorial as the repository has it (its BUILD file and its script)."""
    shutil.copytree(
        REPO / "experiments" / "tutorials",
        root / "experiments" / "tutorials",
        ignore=shutil.ignore_patterns("__pycache__"),
    )


@pytest.fixture
def targets_ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    _tutorial(root)
    for name, text in {
        "BUILD.marin": BUILD,
        "script.py": SCRIPT,
        "helper.py": HELPER,
        "shared.py": SHARED,
        "sums.py": SUMS,
    }.items():
        (root / "pipe" / name).write_text(textwrap.dedent(text))
    return root


def _env(**extra: str) -> dict[str, str]:
    env = node_env()  # (no RAY_ADDRESS)
    env.pop("MARIN_PREFIX", None)
    env.update(extra)
    return env


@dataclass
class Run:
    pid: int
    returncode: int
    stdout: str
    stderr: str


def _run(args: list[str], root: Path, env: dict[str, str]) -> Run:
    """Run ``args`` in ``root``; its pid (the driver's) and what it printed."""
    with subprocess.Popen(args, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    return Run(proc.pid, proc.returncode, out, err)


def _marinbuild(root: Path, env: dict[str, str], *args: str) -> Run:
    return _run([sys.executable, "-m", "marinbuild", *args], root, env)


def _output(prefix: Path, name: str) -> Path:
    (out,) = prefix.glob(f"{name}-*")
    assert st.read_status(str(out)) == "SUCCESS", out
    return out


def test_every_python_target_builds_on_a_cluster_from_the_cli(ray_cluster, targets_ws, tmp_path):
    """executor_script (a script importing a sibling by bare name and a workspace module) and python_step."""
    prefix = tmp_path / "prefix"
    proc = _marinbuild(
        targets_ws,
        _env(RAY_ADDRESS=ray_cluster.address),
        "--backend",
        "ray",
        "--prefix",
        str(prefix),
        "//pipe:total",
        "//pipe:script",
        "//experiments/tutorials:hello_world",
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "Build OK" in proc.stdout
    scaled = _output(prefix / "pipe", "scaled")
    assert json.loads((scaled / "numbers.json").read_text()) == [3, 6, 9, 12]
    stats = json.loads((_output(prefix / "hello_world", "stats") / "stats.json").read_text())
    total = _output(prefix / "pipe", "total")
    assert json.loads((total / ".artifact.json").read_text()) == {"sum": [30, stats["sum"]]}
    for out in (scaled, _output(prefix / "pipe", "base"), total):
        assert (out / "pid").read_text() != str(proc.pid)  # a Ray worker ran it, not the driver


def test_a_marin_script_runs_its_steps_on_a_cluster_with_the_ray_backend(ray_cluster, targets_ws, tmp_path):
    """``MARINBUILD_BACKEND=ray python script.py``: the steps run in Ray tasks (the script's own code by value)."""
    prefix = tmp_path / "prefix"
    env = _env(RAY_ADDRESS=ray_cluster.address, MARINBUILD_BACKEND="ray")
    env["PYTHONPATH"] = os.pathsep.join([str(targets_ws), env["PYTHONPATH"]])  # `pipe.shared`, as an install gives
    proc = _run([sys.executable, "pipe/script.py", "--prefix", str(prefix)], targets_ws, env)
    assert proc.returncode == 0, proc.stderr[-5000:]
    scaled = _output(prefix / "pipe", "scaled")
    assert json.loads((scaled / "numbers.json").read_text()) == [3, 6, 9, 12]
    for out in (scaled, _output(prefix / "pipe", "base")):
        assert (out / "pid").read_text() != str(proc.pid)


def test_the_clis_backend_flag_wins_over_the_scripts_variable(targets_ws, tmp_path):
    """``MARINBUILD_BACKEND`` is for scripts: ``--backend local`` runs the steps in the CLI's own process."""
    prefix = tmp_path / "prefix"
    proc = _marinbuild(
        targets_ws, _env(MARINBUILD_BACKEND="ray"), "--backend", "local", "--prefix", str(prefix), "//pipe:script"
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert (_output(prefix / "pipe", "scaled") / "pid").read_text() == str(proc.pid)


def test_a_marin_script_submitted_to_the_cluster_runs_its_steps_on_ray(ray_cluster, targets_ws, tmp_path):
    """In a Ray job a script's ``executor_main`` uses the cluster, as Marin's does (no variable to set)."""
    prefix, driver = tmp_path / "prefix", tmp_path / "driver.pid"
    proc = _marinbuild(
        targets_ws,
        _env(),
        "submit",
        "--address",
        ray_cluster.dashboard_url,
        "-e",
        "DRIVER_PID_FILE",
        str(driver),
        "--",
        "python",
        "pipe/script.py",
        "--prefix",
        str(prefix),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    scaled = _output(prefix / "pipe", "scaled")
    assert json.loads((scaled / "numbers.json").read_text()) == [3, 6, 9, 12]
    job_driver = driver.read_text()
    for out in (scaled, _output(prefix / "pipe", "base")):
        assert (out / "pid").read_text() != job_driver  # a Ray task ran it, not the job's driver


def test_the_hello_world_tutorial_builds_on_a_private_local_ray(tmp_path):
    """A fresh clone, no cluster: ``--backend ray`` starts a local Ray instance of its own."""
    root = tmp_path / "clone"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    _tutorial(root)
    proc = _marinbuild(root, _env(), "--backend", "ray", "//experiments/tutorials:hello_world")
    assert proc.returncode == 0, proc.stderr[-5000:]
    stats = json.loads((_output(root / "local_store" / "hello_world", "stats") / "stats.json").read_text())
    assert stats == {"sum": 47698, "min": 0, "max": 995}


def test_a_local_ray_that_cannot_start_is_one_line_and_exit_36_and_wedges_nothing(tmp_path):
    """A machine where Ray cannot start (here its temporary folder is a file) is not a marinbuild bug."""
    root = tmp_path / "clone"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    _tutorial(root)
    (tmp_path / "not_a_folder").write_text("")
    broken = {**_env(), "RAY_TMPDIR": str(tmp_path / "not_a_folder")}
    proc = _marinbuild(root, broken, "--backend", "ray", "//experiments/tutorials:hello_world")
    assert proc.returncode == 36, proc.stderr[-5000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("marinbuild: error:")]
    assert len(errors) == 1 and "could not start a local Ray instance, 2 attempts (NotADirectoryError" in errors[0]
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    proc = _marinbuild(root, _env(), "--backend", "ray", "//experiments/tutorials:hello_world")  # nothing wedged
    assert proc.returncode == 0, proc.stderr[-5000:]
    assert "2 built, 0 cached" in proc.stdout


def test_a_step_whose_function_no_worker_can_import_says_why_in_its_first_line(ray_cluster, prefix, tmp_path):
    """Ray's error for a function a worker cannot rebuild ends its first line before the reason."""
    name = f"rt_nowhere_{uuid.uuid4().hex[:8]}"
    (tmp_path / "nowhere.py").write_text("def step(config):\n    return 1\n")
    spec = importlib.util.spec_from_file_location(name, tmp_path / "nowhere.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # importable here, by a name no worker knows
    spec.loader.exec_module(module)
    step = ExecutorStep(name="nowhere", fn=module.step, config={"output_path": this_output_path()})
    summary = BuildSummary()  # the listener whose text the console prints after a build
    executor = Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        listeners=[summary],
        backend=RayBackend(ray_cluster.address),
    )
    with pytest.raises(StepFailedError) as info:
        executor.run([step])
    (failure,) = summary.failures
    line = failure.message  # the one line the summary prints after "FAILED nowhere:"
    assert f"No module named '{name}'" in line and "Ray worker" in line, line
    original = info.value.__cause__
    assert isinstance(original, StepImportError) and isinstance(original.__cause__, RemoteTraceback)
    assert "sys.path" in str(original)  # Ray's own words follow the first line


NOISY_BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "noisy", fn = "noisy:step")
"""

NOISY = """
import logging
import os


def step(config):
    from ray._private.ray_constants import LOGGER_FORMAT

    print("hello from the step", flush=True)
    noise = logging.getLogger("ray.noise")  # a record of Ray's logger, in the format Ray's own records have
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(LOGGER_FORMAT))
    noise.addHandler(handler)
    noise.propagate = False
    noise.warning("ray-noise-marker")
    os.makedirs(config["output_path"], exist_ok=True)
    return {}
"""


@pytest.fixture
def noisy_ws(tmp_path: Path) -> Path:
    root = tmp_path / "noisy"
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "n"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(NOISY_BUILD))
    (root / "noisy.py").write_text(textwrap.dedent(NOISY))
    return root


def test_rays_own_lines_go_to_the_log_and_to_the_console_only_with_v(ray_cluster, noisy_ws, tmp_path):
    env = _env(RAY_ADDRESS=ray_cluster.address)
    quiet = _marinbuild(noisy_ws, env, "--backend", "ray", "--prefix", str(tmp_path / "p1"), "//pipe:noisy")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    log = noisy_ws / ".marinbuild" / "logs" / "ray.log"
    assert "hello from the step" in quiet.stderr  # the step's own output is shown
    assert "ray-noise-marker" not in quiet.stderr and f"Ray's own messages go to {log}" in quiet.stderr
    assert "\x1b[" not in quiet.stderr + quiet.stdout  # no colour codes when stderr is not a terminal
    assert "ray-noise-marker" in log.read_text()

    loud = _marinbuild(noisy_ws, env, "--backend", "ray", "--prefix", str(tmp_path / "p2"), "-v", "//pipe:noisy")
    assert loud.returncode == 0, loud.stderr[-3000:]
    assert "ray-noise-marker" in loud.stderr and "hello from the step" in loud.stderr
