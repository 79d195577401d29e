"""What a build keeps in memory: the mechanisms behind the peak of ``bench/run.py``'s layered 100,000 rows
(``marinbuild-cli``) change nothing a reader of the build sees.

- ``Session.analyse(drop_declarations=True)`` (the build flow's) drops each target's attributes and call site
  once its step is made: every step, version, output path and config is what the analysis without the drop
  gives, and a read of what was dropped raises instead of passing for an empty target;
- computing versions leaves no cyclic garbage behind (it runs with the cyclic collector paused).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from workspaces import age_workspace, write_workspace

from marinbuild.analysis.session import Session
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.load.target import DroppedDeclaration

STEPS_PY = """
def write(config):
    pass
"""

BUILD_A = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "a", fn = "memory_steps:write", config = {"text": "A", "n": [1, 2]}, srcs = ["data.txt"])
python_step(name = "b", fn = "memory_steps:write", config = {"text": "B"}, deps = [":a"])
"""

BUILD_B = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "c", fn = "memory_steps:write", config = {"text": "C"}, deps = ["//a:a", "//a:b"])
python_step(name = "d", fn = "memory_steps:write", config = {"text": "D"}, deps = ["//a:b", ":c"])
"""


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = write_workspace(
        tmp_path / "ws",
        {"memory_steps.py": STEPS_PY, "a/BUILD.marin": BUILD_A, "a/data.txt": "data", "b/BUILD.marin": BUILD_B},
    )
    age_workspace(root)
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    monkeypatch.chdir(root)
    return root


def _built(session: Session) -> list[tuple[str, str, str, str, str]]:
    """Every step of the session's build as its readers see it: name, output path, version, action key, config."""
    engine = session.engine
    assert engine is not None
    return [
        (s.name, engine.output_paths[s], engine.version_strs[s], engine.action_digest(s), repr(engine.configs[s]))
        for s in engine.steps
    ]


def test_dropped_declarations_change_no_step(ws: Path, tmp_path: Path) -> None:
    kept = Session.open(".", prefix=str(tmp_path / "out"))
    kept.load(["//..."])
    kept.analyse()
    dropped = Session.open(".", prefix=str(tmp_path / "out"))
    dropped.load(["//..."])
    dropped.analyse(drop_declarations=True)

    assert _built(dropped) == _built(kept)
    assert len(_built(dropped)) == 4
    assert dropped.loaded is not None and kept.loaded is not None
    for label, target in dropped.loaded.targets.items():
        other = kept.loaded.targets[label]
        assert (target.label, target.rule, target.deps, target.srcs, target.source_paths) == (
            other.label,
            other.rule,
            other.deps,
            other.srcs,
            other.source_paths,
        )
        with pytest.raises(DroppedDeclaration):
            target.attrs["config"]
        with pytest.raises(DroppedDeclaration):
            list(target.attrs)
        with pytest.raises(DroppedDeclaration):
            _ = target.location
        assert other.attrs["config"] is not None and other.location.line > 0
    assert dropped.loaded.expand(["//b/..."]) == kept.loaded.expand(["//b/..."])


NO_CYCLIC_GARBAGE = """
import gc
from marinbuild.core.placeholders import ExecutorStep, output_path_of, this_output_path, versioned
from marinbuild.core.versions import VersionTable

steps = []
for i in range(200):
    config = {"i": versioned(i), "out": this_output_path(), "deps": [output_path_of(s) for s in steps[-2:]]}
    steps.append(ExecutorStep(name=f"s{i}", fn=None, config=config))
gc.collect()
gc.disable()
table = VersionTable("/prefix")
for step in steps:
    table.compute_version(step)
left = gc.collect()
gc.enable()
print(len(table.steps), left)
"""


def test_versions_leave_no_cyclic_garbage() -> None:
    """In a process of its own: ``gc.collect`` counts the whole process's garbage, and threads other tests left
    behind would add theirs to the count."""
    done = subprocess.run([sys.executable, "-c", NO_CYCLIC_GARBAGE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    steps, left = map(int, done.stdout.split())
    assert steps == 200
    assert left == 0


def test_placeholders_have_no_per_object_dict_and_behave_as_before() -> None:
    """``InputName``, ``OutputName`` and ``VersionedValue`` are slotted: equal and hashed by their fields, frozen,
    copied by ``dataclasses.replace`` and pickled as before; an ``ExecutorStep`` still takes extra attributes."""
    import dataclasses
    import pickle

    from marinbuild.core.placeholders import ExecutorStep, InputName, OutputName, VersionedValue

    step = ExecutorStep("s", None, {"x": VersionedValue(1)})
    values = [
        InputName(step, "a"),
        InputName(None, "raw/path", block_on_step=False),
        OutputName("o"),
        VersionedValue(3),
    ]
    for value in values:
        assert not hasattr(value, "__dict__")
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, dataclasses.fields(value)[0].name, "other")
    assert InputName(step, "a") == values[0] and hash(InputName(step, "a")) == hash(values[0])
    assert values[0].nonblocking() == InputName(step, "a", block_on_step=False)
    assert [pickle.loads(pickle.dumps(v)) for v in values[1:]] == values[1:]
    object.__setattr__(step, "_original_step_spec", "kept")  # as ``step_spec`` does
    assert step._original_step_spec == "kept"  # type: ignore[attr-defined]
    assert step.with_output_path("elsewhere").override_output_path == "elsewhere"


LIVE_JOBS: list[int] = []


def _count_live_jobs(config: dict) -> None:
    import gc

    from marinbuild.run.step_job import StepJob

    gc.collect()
    # this run's jobs only: earlier tests of the same process may still hold theirs (in a kept traceback...)
    LIVE_JOBS.append(sum(1 for o in gc.get_objects() if isinstance(o, StepJob) and o.name.startswith("chain/")))


def test_a_run_holds_the_jobs_of_the_steps_in_flight_only(tmp_path: Path) -> None:
    """A step's job (its lease, call and records) is made when it starts and dropped when it is done: a run of many
    steps holds a few jobs at a time, not one per step of the plan (at 100,000 steps, hundreds of megabytes)."""
    from marinbuild.core.placeholders import ExecutorStep
    from marinbuild.executor import Executor

    prefix = str(tmp_path / "prefix")
    steps: list[ExecutorStep] = []
    for i in range(12):  # a chain: one step runs at a time
        steps.append(ExecutorStep(name=f"chain/s{i}", fn=_count_live_jobs, config={"i": i, "after": steps[-1:]}))
    LIVE_JOBS.clear()
    executor = Executor(prefix=prefix, executor_info_base_path=str(tmp_path / "experiments"), listeners=[])
    executor.run(steps, max_concurrent=1)
    assert len(LIVE_JOBS) == 12
    assert max(LIVE_JOBS) <= 3, LIVE_JOBS  # the one running, and at most the one before it, not yet let go
