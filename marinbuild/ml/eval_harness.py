"""lm-eval-harness tasks on a trained checkpoint (the child process of the ``eval_harness`` rule).

Loads the latest checkpoint of a ``train_lm`` output (its ``model.json`` says how to rebuild
the model) and runs levanter's own lm-eval integration on it: ``levanter.eval_harness``'s
``run_eval_harness_main`` with an ``LmEvalHarnessConfig`` of ``TaskConfig`` entries (task name,
few-shot count, alias). Under the output folder:

    results.json        {"checkpoint", "step", "tasks": [the task specs],
                         "results": {task: {metric: value}}, "averages": {...}, "n_samples": {task: n}}
                        metric names without lm-eval's ",none" filter suffix; stderr entries and
                        lm-eval's "sample_len" (that is n_samples) dropped
    lm_eval_output.json lm-eval's whole output as levanter returns it (configs, versions, samples counts)
    logs/               levanter's log and the child's output

Local tasks: the payload's ``task_files`` (the target's YAML task definitions and their data
files, package-relative path -> absolute path) are copied into a fresh folder with the same
layout, lm-eval's ``TaskManager`` gets it as ``include_path``, and the process runs there, so a
YAML's ``dataset_kwargs: {data_files: ...}`` names its data relative to the package. levanter's
``LmEvalHarnessConfig.to_task_dict`` builds its ``TaskManager()`` without an include path and
hands lm-eval each task as a dict of overrides, which lm-eval 0.4.13 reads as a whole inline task
definition (a registered task's dataset and prompts are lost). ``LocalTasksHarnessConfig`` below
therefore loads each task by name from a ``TaskManager`` with the include path, sets its few-shot
count the way lm-eval's own ``simple_evaluate`` does (``Task.set_config``), and renames it to its
alias with levanter's own renaming.

On a multi-host slice (``marinbuild.ml.slice_run``) this module runs once per host, one JAX
distributed job as training is (the payload's ``distributed``, read as ``marinbuild.ml.train``
reads it). levanter's ``run_eval_harness_main`` runs lm-eval on process 0 alone, which sends
each batch of requests to every process (``worker_message_loop``) so the sharded model computes
it together, and returns the outputs on process 0 only (None elsewhere). So process 0 alone
writes ``results.json`` and ``lm_eval_output.json``; another host's process returns a summary
naming its process and writes nothing.

Every task name is checked against lm-eval's registry (plus the local tasks) before the model
is loaded: levanter retries a failing task load with backoff for minutes (meant for Hub rate
limits), so an unknown name would otherwise fail late; here it fails at once, naming the task.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import fsspec

from marinbuild.ml.process import child_main, say

RESULTS = "results.json"
LM_EVAL_OUTPUT = "lm_eval_output.json"


class UnknownTaskError(ValueError):
    """A task name that neither lm-eval's registry nor the target's task files define."""


def trained_tokenizer(model_path: str) -> str:
    """The tokenizer a ``train_lm`` output was trained with (its ``model.json``)."""
    from marinbuild.ml.train import MODEL_INFO

    try:
        with fsspec.open(os.path.join(model_path, MODEL_INFO), "r") as f:
            return json.load(f)["tokenizer"]
    except FileNotFoundError:
        raise FileNotFoundError(f"{model_path} has no {MODEL_INFO}: is it the output of a train_lm target?") from None


def check_task_names(names: list[str], include_path: str | None) -> None:
    """Raise ``UnknownTaskError`` naming every task lm-eval cannot find (with close names, when any)."""
    import difflib

    from lm_eval.tasks import TaskManager

    manager = TaskManager(include_path=include_path)
    known = set(manager.all_tasks)
    unknown = [name for name in names if name not in known]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=3)
        parts.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    where = "lm-eval's task registry" + (" or the target's task_files" if include_path else "")
    raise UnknownTaskError(f"unknown lm-eval task {', '.join(parts)}: not in {where}")


def harness_config(specs: list[dict[str, Any]], include_path: str | None, max_examples: int | None) -> Any:
    """levanter's ``LmEvalHarnessConfig`` for ``specs``, loading tasks with ``include_path`` as well."""
    from levanter.eval_harness import LmEvalHarnessConfig, TaskConfig

    @dataclasses.dataclass(frozen=True)
    class LocalTasksHarnessConfig(LmEvalHarnessConfig):
        include_path: str | None = None

        def to_task_dict(self) -> dict:
            import lm_eval.tasks as tasks

            manager = tasks.TaskManager(include_path=self.include_path)
            loaded: dict = {}
            for spec in self.to_task_spec():
                name = spec["task"]
                ours = str(spec.get("task_alias") or name).replace(" ", "_")
                with warnings.catch_warnings():  # deprecated in lm-eval 0.4.13, but its format is levanter's
                    warnings.simplefilter("ignore", DeprecationWarning)
                    task_dict = tasks.get_task_dict([name], manager)
                if spec.get("num_fewshot") is not None:
                    set_fewshot(task_dict, int(spec["num_fewshot"]))
                for key, value in self._rename_tasks_for_eval_harness(task_dict, name, ours).items():
                    if key in loaded:
                        raise ValueError(f"task {key} is listed twice: give each a task_alias")
                    loaded[key] = value
            return loaded

    return LocalTasksHarnessConfig(
        task_spec=[TaskConfig(**spec) for spec in specs],
        max_examples=max_examples,
        include_path=include_path,
    )


def set_fewshot(task_dict: dict, num_fewshot: int) -> None:
    """Set the few-shot count of every task in an lm-eval task dict (groups included), as lm-eval's
    ``simple_evaluate`` does (``Task.set_config``)."""
    for value in task_dict.values():
        if isinstance(value, dict):
            set_fewshot(value, num_fewshot)
        elif hasattr(value, "set_config"):
            value.set_config(key="num_fewshot", value=num_fewshot)


def copy_task_files(task_files: dict[str, str], root: str) -> str | None:
    """Copy ``{package-relative path: path}`` under ``root``; the folder to include (None: no files)."""
    if not task_files:
        return None
    for relative, source in sorted(task_files.items()):
        dest = os.path.join(root, relative)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with fsspec.open(source, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
    return root


def summarize(outputs: dict[str, Any]) -> dict[str, Any]:
    """Per task ``{metric: value}`` (numbers only, no stderr, no ",none" suffix), the averages, the counts."""

    def clean(metrics: dict[str, Any]) -> dict[str, float]:
        out = {}
        for key, value in metrics.items():
            if "stderr" in key or key == "sample_len" or isinstance(value, bool) or not isinstance(value, int | float):
                continue
            out[key[: -len(",none")] if key.endswith(",none") else key] = float(value)
        return out

    return {
        "results": {task: clean(metrics) for task, metrics in sorted(outputs.get("results", {}).items())},
        "averages": clean(outputs.get("averages", {})),
        "n_samples": {
            task: int(n.get("effective", n.get("original", 0)))
            for task, n in sorted(outputs.get("n-samples", {}).items())
        },
    }


def _host_side_packing() -> None:
    """Pack lm-eval's requests into host-side arrays, as levanter's batching of them expects.

    levanter's ``_pack_requests`` builds each packed example with ``hax.named`` (``jnp.asarray``)
    while the trainer's global mesh is active: with several CPU processes each array then spans
    every process's device, and ``stack_batches`` (which stacks under ``local_cpu_mesh``) rejects
    it ("Received incompatible devices for jitted computation"), so every multi-process
    evaluation failed. Packing under ``local_cpu_mesh`` keeps the examples on this host; process 0
    then broadcasts each batch itself. Applied where the processes get their coordinator
    explicitly (no TPU), as training's ``_host_side_eval_tags`` is.
    """
    import levanter.eval_harness as harness
    from levanter.utils.jax_utils import local_cpu_mesh

    pack = harness._pack_requests
    if getattr(pack, "host_side", False):
        return

    def pack_requests(*args: Any, **kwargs: Any) -> Any:
        with local_cpu_mesh():
            return pack(*args, **kwargs)

    pack_requests.host_side = True  # type: ignore[attr-defined]
    harness._pack_requests = pack_requests


def run(payload: dict[str, Any]) -> dict[str, Any]:
    import jmp
    from levanter.distributed import DistributedConfig
    from levanter.eval_harness import EvalHarnessMainConfig, run_eval_harness_main
    from levanter.tracker import NoopConfig
    from levanter.trainer import TrainerConfig
    from levanter.utils.py_utils import FailSafeJSONEncoder

    from marinbuild.ml.configs import LmModel, from_dict, to_levanter_model
    from marinbuild.ml.tokenizer import resolve_tokenizer
    from marinbuild.ml.train import (
        MODEL_INFO,
        _cpu_collectives_unless_tpu,
        _distributed_config,
        compilation_cache_dir,
        latest_checkpoint,
    )

    out = payload["output_path"]
    train_out = payload["model_path"]
    with fsspec.open(os.path.join(train_out, MODEL_INFO), "r") as f:
        info = json.load(f)
    specs: list[dict[str, Any]] = payload["tasks"]
    distributed = payload.get("distributed")
    if isinstance(distributed, dict):  # a host of a slice without TPU chips: its collectives run on CPU
        _cpu_collectives_unless_tpu()
        _host_side_packing()
    work = tempfile.mkdtemp(prefix="marinbuild-lm-eval-")
    try:
        include_path = copy_task_files(payload.get("task_files") or {}, os.path.join(work, "package"))
        check_task_names(sorted({spec["task"] for spec in specs}), include_path)
        checkpoints = os.path.join(train_out, "checkpoints")
        checkpoint, step = latest_checkpoint(checkpoints)
        if checkpoint is None:
            raise FileNotFoundError(f"no checkpoint under {checkpoints}: has the model been trained?")
        names = ", ".join(spec.get("task_alias") or spec["task"] for spec in specs)
        say(f"lm-eval-harness on {checkpoint} (step {step}): {names}")
        tokenizer = resolve_tokenizer(info["tokenizer"])
        batch = payload.get("batch_size") or 8
        log_dir = os.path.join(out, "logs") if "://" not in out else os.path.join(work, "logs")
        config = EvalHarnessMainConfig(
            eval_harness=harness_config(specs, include_path, payload.get("max_examples") or None),
            tokenizer=tokenizer,
            checkpoint_path=checkpoints,
            model=to_levanter_model(from_dict(LmModel, info["model"]), tokenizer),
            trainer=TrainerConfig(
                id=os.path.basename(out.rstrip("/")),
                log_dir=Path(log_dir),
                tracker=(NoopConfig(),),
                mp=jmp.get_policy(info.get("mp", "p=f32")),
                train_batch_size=batch,
                per_device_eval_parallelism=-1,
                require_accelerator=bool(payload.get("require_accelerator")),
                distributed=_distributed_config(DistributedConfig, distributed),
                jax_compilation_cache_dir=compilation_cache_dir(),
                log_jaxprs=False,
                log_xla_hlo=False,
            ),
        )
        # lm-eval resolves the local tasks' data files from the working folder; levanter prints its whole
        # output to stdout at the end, which belongs in the log, not on the build's console.
        os.makedirs(log_dir, exist_ok=True)
        previous = os.getcwd()
        os.chdir(include_path or work)
        try:
            with open(os.path.join(work, "stdout.txt"), "w") as sink, contextlib.redirect_stdout(sink):
                outputs = run_eval_harness_main(config)
        finally:
            os.chdir(previous)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if outputs is None:  # not process 0 of a slice: levanter returns the outputs on process 0 only
        import jax

        return {"checkpoint": checkpoint, "step": step, "process_index": jax.process_index()}
    result = {"checkpoint": checkpoint, "step": step, "tasks": specs, **summarize(outputs)}
    fs, root = fsspec.core.url_to_fs(out)
    fs.makedirs(root, exist_ok=True)
    with fsspec.open(os.path.join(out, LM_EVAL_OUTPUT), "w") as f:
        json.dump(outputs, f, indent=2, cls=FailSafeJSONEncoder)
    with fsspec.open(os.path.join(out, RESULTS), "w") as f:
        json.dump(result, f, indent=2)
    for task, metrics in result["results"].items():
        say(f"{task}: " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items())))
    return result


if __name__ == "__main__":
    child_main(run)
