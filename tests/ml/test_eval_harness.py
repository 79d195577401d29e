"""``eval_harness`` for real: lm-eval-harness, through levanter, on the quickstart's tiny trained model.

The task is the quickstart's own (``experiments/quickstart/tasks``: a YAML and a JSON-lines file,
loaded offline). The shared quickstart build (``built_quickstart``) runs it with the rest of the
pipeline; these tests read its results, rebuild it (cached: nothing runs, the same numbers), and
build a target with a mistyped task name in a package of its own, so the shared ``:all`` stays green.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from qs_workspace import needs_levanter

TARGET = "experiments/quickstart/story_tasks"
TASKS = {"story_object_0shot"}


@needs_levanter
@pytest.mark.timeout(1200)
def test_metrics_come_out_and_reach_the_report(built_quickstart):
    ws, build = built_quickstart
    assert TARGET in build.ran
    result = json.loads((ws.output("story_tasks") / "results.json").read_text())
    assert result["step"] == 29
    assert set(result["results"]) == TASKS
    for task in TASKS:
        metrics = result["results"][task]
        assert set(metrics) == {"acc", "acc_norm"}
        assert 0.0 <= metrics["acc"] <= 1.0 and 0.0 <= metrics["acc_norm"] <= 1.0
        assert result["n_samples"][task] == 20
    assert result["tasks"] == [
        {"task": "quickstart_story_object", "num_fewshot": 0, "task_alias": "story_object_0shot"}
    ]
    assert "results" in json.loads((ws.output("story_tasks") / "lm_eval_output.json").read_text())
    report = json.loads((ws.output("report") / "metrics.json").read_text())
    assert {task: s["value"] for task, s in report["task_scores"].items()} == {
        task: result["results"][task]["acc"] for task in TASKS
    }


@needs_levanter
@pytest.mark.timeout(1200)
def test_a_rebuild_is_cached_with_the_same_metrics(built_quickstart):
    ws, _ = built_quickstart
    before = (ws.output("story_tasks") / "results.json").read_bytes()
    build = ws.build("//experiments/quickstart:story_tasks")
    assert build.code == 0, build.stderr[-3000:]
    assert build.ran == set()
    assert TARGET in build.already_built
    assert (ws.output("story_tasks") / "results.json").read_bytes() == before


@needs_levanter
@pytest.mark.timeout(1200)
def test_an_unknown_task_fails_naming_it(built_quickstart):
    ws, _ = built_quickstart
    package = ws.root / "experiments" / "badtask"
    package.mkdir(parents=True, exist_ok=True)
    (package / "BUILD.marin").write_text(
        'load("@marinbuild//rules:eval_harness.py", "eval_harness")\n'
        'eval_harness(name = "bad", model = "//experiments/quickstart:lm", tasks = ["hellaswagg"])\n'
    )
    build = ws.build("//experiments/badtask:bad")
    assert build.code == 1, build.stderr[-3000:]
    assert "unknown lm-eval task 'hellaswagg'" in build.stderr
    assert "did you mean" in build.stderr and "hellaswag" in build.stderr
    assert "experiments/badtask/bad" in {e["step"] for e in build.events if e["kind"] == "started"}


VERSIONED = """
load("@marinbuild//rules:tokenize.py", "tokenize")
load("@marinbuild//rules:train.py", "train_lm")
load("@marinbuild//rules:eval_harness.py", "eval_harness")
tokenize(name = "tok", tokenizer_name = "gpt2")
train_lm(name = "lm", data = {":tok": 1.0}, model = {}, trainer = {"batch_size": 8, "num_train_steps": 10})
eval_harness(name = "ev", model = ":lm", tasks = TASKS, task_files = ["t.yaml"], resources = RESOURCES)
"""


def _planned_path(root: Path, tasks: str, resources: str, task_file: str) -> str:
    (root / "pipe").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "out"\n')
    (root / "pipe" / "t.yaml").write_text(task_file)
    build = VERSIONED.replace("TASKS", tasks).replace("RESOURCES", resources)
    (root / "pipe" / "BUILD.marin").write_text(build)
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    proc = subprocess.run(
        [sys.executable, "-m", "marinbuild", "-n", "//pipe:ev", "--output", "json"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    (target,) = json.loads(proc.stdout)["targets"]
    return target["output_path"]


def test_tasks_fewshot_and_task_files_are_versioned_resources_are_not(tmp_path):
    zero = '[{"task": "x", "num_fewshot": 0}]'
    base = _planned_path(tmp_path, zero, "{}", "task: x\n")
    assert _planned_path(tmp_path, zero, 'tpu("v4-8")', "task: x\n") == base
    assert _planned_path(tmp_path, '[{"task": "x", "num_fewshot": 2}]', "{}", "task: x\n") != base
    assert _planned_path(tmp_path, '["x", "y"]', "{}", "task: x\n") != base
    assert _planned_path(tmp_path, zero, "{}", "task: x\nmetadata: {version: 2}\n") != base
