"""`why`: why each step of a target would (re)run, on real workspaces and prefixes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from marinbuild.analysis.session import Session
from marinbuild.cache.why import (
    ABANDONED,
    BUILT,
    DAMAGED,
    FAILED_BEFORE,
    INCOMPLETE,
    NEVER_BUILT,
    RUNNING_ELSEWHERE,
    VERSION_CHANGED,
    dependency_id,
    explain_step,
    format_why,
    version_changes,
    why,
    why_as_dict,
    why_targets,
)
from marinbuild.executor import StepFailedError
from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path

STEPS = """
import json, os


def write(config):
    if config.get("fail"):
        raise RuntimeError("boom")
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(json.dumps(config.get("n")))
    return {"n": config.get("n")}
"""

SCRIPT = """
from dataclasses import dataclass
from marinbuild.executor import ExecutorStep, this_output_path, versioned


@dataclass(frozen=True)
class C:
    output_path: str
    v: int


def noop(config):
    return None


left = ExecutorStep(name="script/left", fn=noop, config=C(output_path=this_output_path(), v=versioned(1)))
right = ExecutorStep(name="script/right", fn=noop, config=C(output_path=this_output_path(), v=versioned(2)))
"""


def build_file(module: str, n: int = 1, b_config: str = '{"m": 2}', fail: bool = False) -> str:
    a_config = f'{{"n": {n}, "fail": True}}' if fail else f'{{"n": {n}}}'
    return textwrap.dedent(f"""
        load("@marinbuild//rules:python.py", "executor_script", "python_step")
        python_step(name = "a", fn = "{module}:write", config = {a_config})
        python_step(name = "b", fn = "{module}:write", config = {b_config}, deps = [":a"])
        executor_script(name = "both", script = "script.py")
    """).lstrip()


class Ws:
    """A throw-away workspace (``pkg/BUILD.marin``) and prefix."""

    def __init__(self, root: Path, prefix: Path):
        self.root, self.prefix = root, prefix
        self.module = "steps_" + uuid.uuid4().hex[:8]
        root.mkdir(parents=True)
        (root / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.marinbuild]\n")
        (root / f"{self.module}.py").write_text(STEPS)
        (root / "pkg").mkdir()
        (root / "pkg" / "script.py").write_text(SCRIPT)
        self.write()

    def write(self, **kwargs) -> None:
        (self.root / "pkg" / "BUILD.marin").write_text(build_file(self.module, **kwargs))

    def session(self, *patterns: str) -> Session:
        s = Session.open(self.root, prefix=str(self.prefix))
        s.load(list(patterns) or ["//pkg:b"])
        s.analyse()
        return s

    def build(self, *patterns: str) -> Session:
        s = self.session(*patterns)
        s.engine.run(s.requested_steps())
        return s


@pytest.fixture
def ws(tmp_path: Path) -> Ws:
    return Ws(tmp_path / "ws", tmp_path / "prefix")


def by_step(explanations):
    return {e.step: e for e in explanations}


def test_never_built_lists_dependencies_first(ws):
    s = ws.session()
    out = why(s, "//pkg:b")
    assert [e.step for e in out] == ["pkg/a", "pkg/b"]
    assert [e.reason for e in out] == [NEVER_BUILT, NEVER_BUILT]
    assert [e.requested for e in out] == [False, True]
    assert out[1].output_path == s.output_paths_of(s.labels[0])[0]
    text = format_why(out)
    assert "pkg/a [needed dependency]: would run: never built" in text
    assert "pkg/b: would run: never built" in text


def test_built_target_is_up_to_date_and_dependencies_are_not_listed(ws):
    ws.build()
    out = why(ws.session(), "//pkg:b")
    assert [(e.step, e.reason, e.will_run) for e in out] == [("pkg/b", BUILT, False)]
    assert "pkg/b: up to date" in format_why(out)


def test_changed_versioned_value_in_build_file(ws):
    before = ws.build()
    (b_step,) = before.steps_of(before.labels[0])
    old_b_path = before.engine.output_paths[b_step]
    old_a_path = before.engine.output_paths[before.engine.dependencies[b_step][0]]
    ws.write(n=2)
    after = ws.session()
    out = by_step(why(after, "//pkg:b"))
    a, b = out["pkg/a"], out["pkg/b"]
    assert a.reason == VERSION_CHANGED and not a.requested
    assert a.previous_output_path == old_a_path
    assert a.changes == ["config.attrs.config.n: 1 -> 2"]
    new_a_path = a.output_path
    old_hash, new_hash = old_a_path.rsplit("-", 1)[1], new_a_path.rsplit("-", 1)[1]
    assert b.reason == VERSION_CHANGED and b.previous_output_path == old_b_path
    assert b.changes == [f"dependency pkg/a: pkg/a-{old_hash} -> pkg/a-{new_hash}"]
    text = format_why(list(out.values()))
    assert "config.attrs.config.n: 1 -> 2" in text and f"dependency pkg/a: pkg/a-{old_hash}" in text
    assert explain_step(after, after.steps_of(after.labels[0])[0]) == (
        f"version changed: dependency pkg/a: pkg/a-{old_hash} -> pkg/a-{new_hash}"
    )


def test_added_and_removed_config_keys(ws):
    ws.build()
    ws.write(b_config='{"k": "v"}')
    b = by_step(why(ws.session(), "//pkg:b"))["pkg/b"]
    assert b.reason == VERSION_CHANGED
    assert b.changes == ['config.attrs.config.k: (absent) -> "v"', "config.attrs.config.m: 2 -> (absent)"]


def test_most_recent_other_version_is_compared(ws):
    ws.build()
    ws.write(n=2)
    ws.build()
    ws.write(n=3)
    a = by_step(why(ws.session(), "//pkg:b"))["pkg/a"]
    assert a.changes == ["config.attrs.config.n: 2 -> 3"]


def test_failed_before(ws):
    ws.write(fail=True)
    with pytest.raises(StepFailedError):
        ws.build()
    s = ws.session()
    out = by_step(why(s, "//pkg:b"))
    assert out["pkg/a"].reason == FAILED_BEFORE and out["pkg/a"].status == "FAILED"
    assert out["pkg/b"].reason == NEVER_BUILT
    traceback = f"{out['pkg/a'].output_path}/.marinbuild_traceback.txt"  # the failure's traceback, kept
    assert (
        explain_step(s, s.engine.dependencies[s.steps_of(s.labels[0])[0]][0])
        == f"failed before (status FAILED; traceback: {traceback})"
    )


def test_output_deleted(ws):
    s = ws.build()
    b_path = s.output_paths_of(s.labels[0])[0]
    Path(b_path, st.STATUS_FILE).unlink()
    out = why(ws.session(), "//pkg:b")
    assert [(e.step, e.reason) for e in out] == [("pkg/b", INCOMPLETE)]
    assert "has no status" in (out[0].detail or "")


def test_a_folder_holding_only_its_executor_info_is_never_built(ws):
    """Marin (and marinbuild, for steps run_only leaves out and pseudo-dependencies) writes ``.executor_info``
    before a step runs: a folder with nothing else is a step not built yet, not a deleted output."""
    s = ws.session()
    (b_step,) = s.steps_of(s.labels[0])
    s.engine.run([b_step], run_only=["pkg/a$"])
    assert sorted(os.listdir(s.engine.output_paths[b_step])) == [".executor_info"]
    out = by_step(why(ws.session(), "//pkg:b"))
    assert out["pkg/b"].reason == NEVER_BUILT


def test_success_without_info_is_built(ws):
    s = ws.build()
    b_path = s.output_paths_of(s.labels[0])[0]
    Path(b_path, ".executor_info").unlink()
    Path(b_path, ".artifact.json").unlink()
    assert [e.reason for e in why(ws.session(), "//pkg:b")] == [BUILT]


def _fake_run(path: str, worker: str, age: float) -> None:
    Path(path).mkdir(parents=True, exist_ok=True)
    st.write_status(path, st.STATUS_RUNNING)
    Path(lease_path(path)).write_bytes(encode_lease(LeaseRecord(worker, time.time() - age)))


def test_running_elsewhere_and_abandoned(ws):
    s = ws.session("//pkg:a")
    a_path = s.output_paths_of(s.labels[0])[0]
    _fake_run(a_path, "other-host-42", 1.0)
    (e,) = why(s, "//pkg:a")
    assert e.reason == RUNNING_ELSEWHERE and e.lease_holder == "other-host-42"
    assert 0.5 <= e.lease_age < 60
    assert "lease held by other-host-42" in format_why([e])
    assert explain_step(s, s.steps_of(s.labels[0])[0]).startswith("running elsewhere (lease held by other-host-42")
    _fake_run(a_path, "dead-host", 10_000.0)
    (e,) = why(s, "//pkg:a")
    assert e.reason == ABANDONED and e.lease_holder == "dead-host" and "stale" in (e.detail or "")
    Path(lease_path(a_path)).unlink()
    (e,) = why(s, "//pkg:a")
    assert e.reason == ABANDONED and e.detail == "status RUNNING but no lease"


def test_damaged_status_is_reported_not_raised(ws):
    s = ws.build()
    b_path = s.output_paths_of(s.labels[0])[0]
    Path(b_path, st.STATUS_FILE).write_text("GARBAGE")
    out = by_step(why(ws.session(), "//pkg:b"))
    b = out["pkg/b"]
    assert b.reason == DAMAGED and b.will_run
    assert st.STATUS_FILE in (b.error or "") and b_path in (b.error or "")
    assert "pkg/a" not in out  # built, so not listed


def test_damaged_lease_is_reported(ws):
    s = ws.session("//pkg:a")
    a_path = s.output_paths_of(s.labels[0])[0]
    _fake_run(a_path, "x", 0)
    Path(lease_path(a_path)).write_text("{not json")
    (e,) = why(s, "//pkg:a")
    assert e.reason == DAMAGED and ".lock" in (e.error or "")


def test_target_with_several_steps(ws):
    s = ws.session("//pkg:both")
    out = why(s, "//pkg:both")
    assert sorted(e.step for e in out) == ["script/left", "script/right"]
    assert all(e.reason == NEVER_BUILT and e.requested for e in out)
    ws.build("//pkg:both")
    assert [e.reason for e in why(ws.session("//pkg:both"), "//pkg:both")] == [BUILT, BUILT]


def test_json_form(ws):
    ws.build()
    ws.write(n=2)
    out = why(ws.session(), "//pkg:b")
    data = json.loads(json.dumps(why_as_dict("//pkg:b", out)))
    assert data["target"] == "//pkg:b"
    assert data["to_run"] == ["pkg/a", "pkg/b"]
    assert data["steps"][0]["changes"] == ["config.attrs.config.n: 1 -> 2"]
    assert data["steps"][0]["will_run"] is True


def test_why_loads_an_unanalysed_label(ws):
    s = Session.open(ws.root, prefix=str(ws.prefix))
    assert [e.step for e in why(s, "//pkg:a")] == ["pkg/a"]


def cli_why(ws: Ws, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, in a subprocess, in the workspace."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ws.root), *sys.path]))
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", "why", "--prefix", str(ws.prefix), *args],
        cwd=ws.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("pattern", ["//pkg:all", "//pkg/...", "//..."])
def test_cli_why_explains_each_target_a_pattern_matches(ws, pattern):
    ws.build("//pkg:a")
    done = cli_why(ws, pattern)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    sections = {block.split("\n", 1)[0]: block for block in done.stdout.strip().split("\n\n")}
    assert sorted(sections) == ["//pkg:a", "//pkg:b", "//pkg:both"]
    assert "pkg/a: up to date" in sections["//pkg:a"]
    assert "pkg/b: would run: never built" in sections["//pkg:b"]
    assert "script/left: would run: never built" in sections["//pkg:both"]
    assert "script/right: would run: never built" in sections["//pkg:both"]

    done = cli_why(ws, pattern, "--output", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["patterns"] == [pattern]
    targets = {t["target"]: t for t in data["targets"]}
    assert sorted(targets) == ["//pkg:a", "//pkg:b", "//pkg:both"]
    assert targets["//pkg:a"]["to_run"] == []
    assert targets["//pkg:b"]["to_run"] == ["pkg/b"]
    assert sorted(targets["//pkg:both"]["to_run"]) == ["script/left", "script/right"]
    assert sorted(data["to_run"]) == ["pkg/b", "script/left", "script/right"]


def test_cli_why_of_one_label_keeps_its_form(ws):
    done = cli_why(ws, "//pkg:b", "--output", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["target"] == "//pkg:b" and data["to_run"] == ["pkg/a", "pkg/b"]
    done = cli_why(ws, "//pkg:all", "-//pkg:both")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("//")] == ["//pkg:a", "//pkg:b"]


def test_why_of_a_pattern_in_process_lists_each_step_once(ws):
    out = why(ws.session("//pkg:all"), "//pkg:all")
    assert [e.step for e in out].count("pkg/a") == 1
    assert by_step(out)["pkg/a"].requested  # owned by the matched //pkg:a, not just a dependency of //pkg:b
    assert sorted(e.step for e in out) == ["pkg/a", "pkg/b", "script/left", "script/right"]
    groups = why_targets(ws.session("//pkg:all"), ["//pkg:all"])
    assert [g.target for g in groups] == ["//pkg:a", "//pkg:b", "//pkg:both"]


# -- version differences, directly ---------------------------------------------------------------


def _v(name, config, deps=(), pseudo=None):
    v = {"name": name, "config": config, "dependencies": list(deps)}
    if pseudo is not None:
        v["pseudo_dependencies"] = list(pseudo)
    return v


def test_dependency_ids():
    dep = _v("x/a", {"k": 1})
    name, ident = dependency_id(dep)
    assert name == "x/a" and len(ident) == len("x/a-") + 6 and ident.startswith("x/a-")
    assert dependency_id("deep/step-abc123") == ("deep/step", "deep/step-abc123")


def test_version_changes_dependencies_and_pseudo_dependencies():
    a1, a2 = _v("a", {"k": 1}), _v("a", {"k": 2})
    c = _v("c", {})
    old = _v("s", {"x": 1}, [a1, "deep-aaaaaa"], pseudo=[c])
    new = _v("s", {"x": 1}, [a2, "deep-bbbbbb", _v("d", {})], pseudo=[])
    _, h1 = dependency_id(a1)
    _, h2 = dependency_id(a2)
    _, hc = dependency_id(c)
    _, hd = dependency_id(_v("d", {}))
    assert version_changes(old, new) == [
        f"dependency a: {h1} -> {h2}",
        "dependency deep: deep-aaaaaa -> deep-bbbbbb",
        f"dependency added: {hd}",
        f"pseudo-dependency removed: {hc}",
    ]


def test_version_changes_values():
    long_old, long_new = "x" * 300, "y" * 300
    changes = version_changes(_v("s", {"a": 1, "b": long_old, "t": True}), _v("s", {"a": 1.5, "b": long_new, "t": 1}))
    assert changes[0] == "config.a: 1 -> 1.5"
    assert changes[1].startswith('config.b: "xxx') and changes[1].endswith("...") and len(changes[1]) < 200
    assert changes[2] == "config.t: true -> 1"
    assert version_changes(_v("s", {"a": 1}), _v("s", {"a": 1})) == []
