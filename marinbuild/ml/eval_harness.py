"""lm-eval-harness tasks on a trained checkpoint (the child process of the ``eval_harness`` rule).

Rebuilds the model of a ``train_lm`` output's latest checkpoint (``model.json``) and runs levanter's
``run_eval_harness_main`` (tasks from ``marinbuild.ml.lm_eval_tasks``). Writes ``results.json`` (``checkpoint``,
``step``, ``tasks``, ``results`` per task and metric without lm-eval's ",none" suffix, stderr entries dropped,
``averages``, ``n_samples``), ``lm_eval_output.json`` (lm-eval's whole output) and ``logs/``. On a multi-host slice this
runs on every host as one JAX distributed job (``ml.distributed``); levanter returns the outputs on process 0 only,
which alone writes the files."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from typing import Any

import fsspec

from marinbuild.ml.configs import LmModel, from_dict, to_levanter_model
from marinbuild.ml.distributed import start_distributed
from marinbuild.ml.evaluate import eval_trainer, trained_checkpoint, trained_model
from marinbuild.ml.lm_eval_tasks import check_task_names, copy_task_files, harness_config
from marinbuild.ml.process import child_main, say
from marinbuild.ml.tokenizer import resolve_tokenizer

RESULTS = "results.json"
LM_EVAL_OUTPUT = "lm_eval_output.json"


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


def run(payload: dict[str, Any]) -> dict[str, Any]:
    from levanter.eval_harness import EvalHarnessMainConfig, run_eval_harness_main
    from levanter.tracker import NoopConfig
    from levanter.utils.py_utils import FailSafeJSONEncoder

    out = payload["output_path"]
    train_out = payload["model_path"]
    info = trained_model(train_out)
    specs: list[dict[str, Any]] = payload["tasks"]
    start_distributed(payload.get("distributed"))  # as training starts it, on real and simulated hosts alike
    work = tempfile.mkdtemp(prefix="marinbuild-lm-eval-")
    try:
        include_path = copy_task_files(payload.get("task_files") or {}, os.path.join(work, "package"))
        check_task_names(sorted({spec["task"] for spec in specs}), include_path)
        checkpoint, step = trained_checkpoint(train_out)
        names = ", ".join(spec.get("task_alias") or spec["task"] for spec in specs)
        say(f"lm-eval-harness on {checkpoint} (step {step}): {names}")
        tokenizer = resolve_tokenizer(info["tokenizer"])
        log_dir = os.path.join(out, "logs") if "://" not in out else os.path.join(work, "logs")
        config = EvalHarnessMainConfig(
            eval_harness=harness_config(specs, include_path, payload.get("max_examples") or None),
            tokenizer=tokenizer,
            checkpoint_path=os.path.join(train_out, "checkpoints"),
            model=to_levanter_model(from_dict(LmModel, info["model"]), tokenizer),
            trainer=eval_trainer(payload, info, log_dir, tracker=(NoopConfig(),)),
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
