"""Resource requests, the local backend's refusal, remote(), runtime envs and the infra configs (no cluster)."""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pipelines as pl
import pytest

from marinbuild.core.resources import Resources, normalize, parse_memory, tpu, tpu_slice
from marinbuild.executor import Executor, ExecutorStep, remote, this_output_path, versioned
from marinbuild.run.ray_task import relocate_paths
from marinbuild.run.resources import UnsatisfiableResourcesError, check_local, local_tpu_chips
from marinbuild.run.runtime_env import WORKING_DIR_EXCLUDES, pip_requirements, step_runtime_env, workspace_runtime_env
from marinbuild.run.step_call import StepCall

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clear_calls():
    pl.CALLS.clear()
    yield


def test_tpu_maps_to_the_resources_a_tpu_host_advertises():
    assert tpu("v4-8").to_ray_options() == {"resources": {"TPU-v4-8-head": 1, "TPU": 4}}
    assert tpu("v5e-8").to_ray_options() == {"resources": {"TPU-v5litepod-8-head": 1, "TPU": 8}}
    assert tpu("v6e-4", cpu=8, memory="64g").to_ray_options() == {
        "num_cpus": 8,
        "memory": 64 * 2**30,
        "resources": {"TPU-v6e-4-head": 1, "TPU": 4},
    }
    # A multi-host slice: the step's own task holds nothing of it (it reserves the slice with ray.util.tpu), and
    # runs on a node that is not a spot VM.
    assert tpu("v4-64").to_ray_options() == {"label_selector": {"ray.io/market-type": "!spot"}}
    assert not tpu("v4-64").fresh_worker
    assert tpu_slice("v4-2048").topology == "8x8x16" and tpu_slice("v4-16").topology == "2x2x2"
    assert tpu_slice("v4-64").vms == 8 and tpu_slice("v5litepod-16").chips_per_vm == 4
    assert tpu("v4-8").fresh_worker and not Resources(cpu=1).fresh_worker
    with pytest.raises(ValueError, match="unknown TPU type"):
        tpu("v9-8")


def test_every_form_of_a_request_normalizes():
    assert normalize(None) is None
    as_dict = normalize({"cpu": 4, "memory": "16GB", "gpu": 1, "custom": {"spot": 1}, "TPU": 2})
    assert as_dict == Resources(cpu=4, memory=16 * 10**9, gpu=1, custom={"spot": 1, "TPU": 2})
    assert as_dict.to_ray_options() == {
        "num_cpus": 4,
        "num_gpus": 1,
        "memory": 16 * 10**9,
        "resources": {"spot": 1, "TPU": 2},
    }
    assert normalize({"tpu": "v4-8"}) == tpu("v4-8")

    @dataclass
    class TpuConfig:  # Marin's fray ResourceConfig, duck-typed
        variant: str
        kind: str = "tpu"

    @dataclass
    class ResourceConfig:
        cpu: int = 1
        ram: str = "1g"
        device: Any = field(default_factory=lambda: TpuConfig("v5litepod-16"))

    assert normalize(ResourceConfig(cpu=32, ram="128g")) == Resources(cpu=32, memory=128 * 2**30, tpu="v5litepod-16")
    with pytest.raises(ValueError, match="unknown key"):
        normalize({"cpus_per_task": "x"})
    with pytest.raises(TypeError):
        normalize(3)
    assert parse_memory("512Mi") == 512 * 2**20 and parse_memory(1024) == 1024 and parse_memory("2g") == 2 * 2**30


def test_check_local_refuses_accelerators_a_machine_lacks():
    bare = {"tpu_chips": 0, "gpus": 0}  # a machine without accelerators
    assert check_local(None, **bare) is None and check_local({"cpu": 64, "memory": "1t"}, **bare) is None
    message = check_local(tpu("v4-8"), **bare)
    assert message and "v4-8" in message and "no TPU" in message and "--backend ray" in message
    assert "no GPU" in (check_local({"gpu": 1}, **bare) or "")
    assert "1 GPU" in (check_local({"gpu": 2}, tpu_chips=0, gpus=1) or "")
    assert check_local(tpu("v4-8"), tpu_chips=4, gpus=0) is None  # on a v4-8 VM the local backend can run it
    assert "single machine" in (check_local(tpu("v4-32"), tpu_chips=4, gpus=0) or "")


NO_TPU_HERE = pytest.mark.skipif(local_tpu_chips() > 0, reason="this machine has TPU chips: the local backend runs")
"""The tests that build through the local backend on a machine without TPU chips (every CI machine)."""


def _tpu_step(name: str = "train", **kwargs: Any) -> ExecutorStep:
    return ExecutorStep(
        name=name,
        fn=pl.write_text,
        config=pl.WriteConfig(output_path=this_output_path(), text=versioned(name)),
        **kwargs,
    )


@NO_TPU_HERE
def test_the_local_backend_refuses_a_tpu_step_before_running_anything(prefix):
    data = pl.step("data", "d")
    train = ExecutorStep(
        name="train",
        fn=pl.write_text,
        resources=tpu("v4-8"),
        config=pl.WriteConfig(output_path=this_output_path(), text=versioned("t"), inputs=[pl.output_path_of(data)]),
    )
    wrapped = ExecutorStep(
        name="eval",
        fn=remote(pl.write_text, resources={"tpu": "v5e-4"}),
        config=pl.WriteConfig(output_path=this_output_path(), text=versioned("e")),
    )
    executor = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[])
    with pytest.raises(UnsatisfiableResourcesError) as info:
        executor.run([train, wrapped])
    message = str(info.value)
    assert "train needs a TPU v4-8 slice" in message and "eval needs a TPU v5litepod-4 slice" in message
    assert "--backend ray" in message and "nothing ran" in message
    assert pl.CALLS == []
    assert not any(p.name.startswith(("data-", "train-", "eval-")) for p in Path(prefix).iterdir())


@NO_TPU_HERE
def test_a_ray_remote_function_as_fn_runs_locally_and_its_resources_count(prefix):
    ray = pytest.importorskip("ray")
    plain = ExecutorStep(
        name="plain",
        fn=ray.remote(pl.write_text),
        config=pl.WriteConfig(output_path=this_output_path(), text=versioned("p")),
    )
    executor = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[])
    paths = executor.run([plain])
    assert Path(paths[plain], "out.txt").read_text() == "p"
    on_tpu = ExecutorStep(
        name="on_tpu",
        fn=ray.remote(resources={"TPU": 4})(pl.write_text),
        config=pl.WriteConfig(output_path=this_output_path(), text=versioned("t")),
    )
    with pytest.raises(UnsatisfiableResourcesError, match="on_tpu needs 4 TPU"):
        executor.run([on_tpu])


@NO_TPU_HERE
def test_the_cli_refuses_a_tpu_target_on_the_local_backend(tmp_path, monkeypatch, capsys):
    from marinbuild.cli import main

    root = tmp_path / "ws"
    (root / "pipe").mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "steps.py").write_text("def write(config):\n    raise AssertionError('must not run')\n")
    (root / "pipe" / "BUILD.marin").write_text(
        textwrap.dedent("""
        load("@marinbuild//rules:python.py", "python_step")

        python_step(name = "train", fn = "steps:write", resources = {"tpu": "v4-8", "cpu": 8})
    """)
    )
    monkeypatch.chdir(root)
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    code = main(["//pipe:train"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "pipe/train needs a TPU v4-8 slice" in err and "--backend ray" in err
    assert not list((root / "out").glob("pipe/train-*/.executor_status"))


def test_remote_wraps_a_function_and_runs_it_locally(prefix):
    wrapped = remote(pl.write_text, resources=tpu("v4-8"), pip_dependency_groups=["tpu"], env_vars={"A": "1"})
    assert wrapped.__name__ == "write_text"

    @remote(resources={"cpu": 2})
    def decorated(config: Any) -> str:
        return "ran"

    assert decorated.resources == {"cpu": 2} and decorated(None) == "ran"
    step = ExecutorStep(
        name="r",
        fn=remote(pl.write_text, env_vars={"A": "1"}),
        config=pl.WriteConfig(output_path=this_output_path(), text=versioned("r")),
    )
    executor = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[])
    paths = executor.run([step])
    assert Path(paths[step], "out.txt").read_text() == "r"
    assert '"fn_name": "pipelines.write_text"' in Path(paths[step], ".executor_info").read_text()
    call = StepCall(wrapped, {"x": 1}, resources=None, pip_dependency_groups=["eval"])
    assert call.request() == (tpu("v4-8"), ["eval", "tpu"], {"A": "1"})
    assert StepCall(wrapped, {}, resources={"cpu": 1}).request()[0] == Resources(cpu=1)  # the step's wins
    with pytest.raises(ValueError):
        remote(pl.write_text, resources={"tpu": "v99"})


def test_pip_dependency_groups_resolve_to_requirements(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent("""
        [project]
        name = "my-proj"
        dependencies = ["fsspec"]

        [project.optional-dependencies]
        tpu = ["jax[tpu]>=0.4", "my_proj[gcs]"]
        gcs = ["gcsfs"]

        [dependency-groups]
        eval = ["lm-eval", {include-group = "plots"}]
        plots = ["matplotlib"]
    """)
    )
    assert pip_requirements(["tpu"], tmp_path) == ["jax[tpu]>=0.4", "gcsfs"]
    assert pip_requirements(["eval", "numpy==2.0"], tmp_path) == ["lm-eval", "matplotlib", "numpy==2.0"]
    assert step_runtime_env(["gcs"], {"K": 1}, tmp_path) == {"pip": ["gcsfs"], "env_vars": {"K": "1"}}
    assert step_runtime_env(None, None, tmp_path) is None
    env = workspace_runtime_env(tmp_path, {"A": "b"})
    assert env["working_dir"] == str(tmp_path) and env["env_vars"] == {"A": "b"}
    for excluded in (".venv", ".git", "local_store", "__pycache__", ".marinbuild", "*.egg-info"):
        assert excluded in WORKING_DIR_EXCLUDES


def test_paths_move_with_a_shipped_workspace():
    from marinbuild.analysis.analyze import SourceFile, TargetConfig

    config = TargetConfig(
        label="//p:a",
        rule="r",
        rule_key="k",
        workspace="/home/me/ws",
        attrs={"srcs": [SourceFile("l", "x", "/home/me/ws/p/a.txt")], "other": "/home/me/wsx"},
        output_path="gs://b/out",
    )
    moved = relocate_paths(config, "/home/me/ws", "/tmp/ray/job/wd")
    assert moved.workspace == "/tmp/ray/job/wd"
    assert moved.attrs["srcs"][0].path == "/tmp/ray/job/wd/p/a.txt"
    assert moved.attrs["other"] == "/home/me/wsx" and moved.output_path == "gs://b/out"


def test_settings_choose_the_ray_backend(tmp_path, monkeypatch):
    from marinbuild.analysis.session import Session
    from marinbuild.engine.settings import SettingsError
    from marinbuild.run.backends import BACKEND_NAMES, make_backend
    from marinbuild.run.ray_backend import RayBackend

    assert "ray" in BACKEND_NAMES
    (tmp_path / "pyproject.toml").write_text(
        '[tool.marinbuild]\nprefix = "out"\nray_address = "10.0.0.1:6379"\nray_max_retries = 5\n'
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    settings = Session.open(tmp_path, backend="ray").settings
    backend = make_backend(settings.backend, settings.backend_options())
    assert isinstance(backend, RayBackend)
    assert (backend.address, backend.max_retries, backend.working_dir) == ("10.0.0.1:6379", 5, tmp_path.resolve())
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.2:6379")
    assert Session.open(tmp_path, backend="ray").settings.ray_address == "10.0.0.2:6379"
    assert Session.open(tmp_path, backend="ray", ray_address="x:1").settings.ray_address == "x:1"
    assert Session.open(tmp_path, ray_address="x:1").settings.backend == "ray"  # the flag implies the backend
    monkeypatch.delenv("MARINBUILD_BACKEND", raising=False)
    assert Session.open(tmp_path).settings.backend == "local"
    (tmp_path / "pyproject.toml").write_text('[tool.marinbuild]\nprefix = "out"\nray_bundle_seconds = 0\n')
    with pytest.raises(SettingsError, match="ray_bundle_seconds is not a setting"):
        Session.open(tmp_path, backend="ray")


def test_submit_maps_job_status_to_an_exit_code(monkeypatch):
    from marinbuild.cluster import submit as jobs

    assert jobs.exit_code("SUCCEEDED") == 0 and jobs.exit_code("FAILED", 3) == 3
    assert jobs.exit_code("FAILED", None) == 1 and jobs.exit_code("STOPPED") == 1
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert jobs.resolve_address() == "http://127.0.0.1:8265"
    monkeypatch.setenv("RAY_ADDRESS", "http://h:8265")
    assert jobs.resolve_address() == "http://h:8265" and jobs.resolve_address("http://x:1") == "http://x:1"


def test_importing_marinbuild_never_imports_ray():
    import subprocess

    code = (
        "import sys, marinbuild, marinbuild.executor, marinbuild.cli, marinbuild.core.resources, "
        "marinbuild.run.resources, marinbuild.executor.remote, marinbuild.cluster.submit, marinbuild.run.ray_backend; "
        "print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize("config", sorted((REPO / "infra").glob("*.yaml")), ids=lambda p: p.name)
def test_infra_cluster_configs_parse_and_name_only_resources_we_ask_for(config):
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load(config.read_text())
    node_types = data["available_node_types"]
    assert data["head_node_type"] in node_types
    assert node_types[data["head_node_type"]]["resources"] == {"CPU": 0}  # no steps on the head
    tpu_types = 0
    for name, node_type in node_types.items():
        if name == data["head_node_type"]:
            continue
        assert 0 == node_type["min_workers"] < node_type["max_workers"] <= data["max_workers"]
        node = node_type["node_config"]
        accelerator = node.get("acceleratorType")
        resources = dict(node_type["resources"])
        resources.pop("CPU")
        if accelerator is None:
            assert resources == {} and node["scheduling"] == [{"preemptible": True}]
            continue
        tpu_types += 1
        assert node["schedulingConfig"] == {"preemptible": True}
        s = tpu_slice(accelerator)
        # exactly what a step with tpu(type) asks for; for a multi-host slice, what ray.util.tpu reserves
        assert resources == (
            tpu(accelerator).ray_resources() if not s.multi_host else {"TPU": s.chips_per_vm, s.head_resource: 1}
        )
    assert tpu_types >= 1
    setup = "\n".join(data["setup_commands"])
    assert "pip install -e" in setup and "marinbuild[ray,gcs]" in setup
    assert data["file_mounts"] == {"~/marinbuild": "."}
    try:
        from ray.autoscaler._private.util import fillout_defaults, validate_config
    except ImportError:
        return
    validate_config(fillout_defaults(data))  # Ray's own schema for `ray up`
