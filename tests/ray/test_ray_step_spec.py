"""Marin's ``StepSpec`` steps (a function of the output path) on the Ray backend, on a real local Ray cluster."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from marinbuild.executor import Executor, ExecutorStep, output_path_of, resolve_executor_step, this_output_path
from marinbuild.executor.step_spec import StepSpec
from marinbuild.run.ray_backend import RayBackend
from marinbuild.store import status as st

pytestmark = pytest.mark.timeout(240)


def write_here(output_path: str) -> dict:
    """A StepSpec function: writes into its output path and says which process ran it."""
    os.makedirs(output_path, exist_ok=True)
    Path(output_path, "out.txt").write_text("spec")
    return {"pid": os.getpid()}


def copy_input(config: dict) -> None:
    os.makedirs(config["output_path"], exist_ok=True)
    text = Path(config["input"]).read_text()
    Path(config["output_path"], "out.txt").write_text(text + "+copied")


def call_with(fn: object, output_path: str) -> object:
    return fn(output_path)  # type: ignore[operator]


def test_a_step_spec_and_a_resolved_step_run_on_ray(ray_cluster, prefix):
    spec = StepSpec(name="rayspec/spec", output_path_prefix=prefix, hash_attrs={"k": 1}, fn=write_here)
    as_step = spec.as_executor_step()
    consumer = ExecutorStep(
        name="rayspec/consumer",
        fn=copy_input,
        config={"input": output_path_of(as_step, "out.txt"), "output_path": this_output_path()},
    )
    executor = Executor(
        prefix=prefix,
        executor_info_base_path=os.path.join(prefix, "experiments"),
        listeners=[],
        backend=RayBackend(ray_cluster.address),
    )
    executor.run([consumer])
    assert json.loads(Path(spec.output_path, ".artifact.json").read_text())["pid"] != os.getpid()
    assert Path(executor.output_paths[consumer], "out.txt").read_text() == "spec+copied"
    assert st.read_status(spec.output_path) == st.read_status(executor.output_paths[consumer]) == "SUCCESS"

    # A resolved ExecutorStep's function (fn(output_path)) is picklable: it runs in a Ray task too.
    import ray

    resolved = resolve_executor_step(consumer, executor.configs[consumer], executor.output_paths[consumer])
    Path(resolved.output_path, "out.txt").unlink()
    ray.get(ray.remote(call_with).remote(resolved.fn, resolved.output_path))
    assert Path(resolved.output_path, "out.txt").read_text() == "spec+copied"
