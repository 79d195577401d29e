"""`cache status/show/ls/gc` and `clean` on real workspaces and prefixes (and an fsspec memory prefix)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import fsspec
import pytest

from marinbuild.analysis.session import Session
from marinbuild.cache.commands import (
    StepState,
    cache_ls,
    cache_show,
    cache_status,
    clean,
    format_clean,
    format_ls,
    format_show,
    format_table,
    target_row,
)
from marinbuild.cache.gc import cache_gc, format_gc
from marinbuild.executor import StepFailedError
from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path

STEPS = """
import fsspec


def write(config):
    if config.get("fail"):
        raise RuntimeError("boom")
    with fsspec.open(config["output_path"] + "/out.txt", "w", auto_mkdir=True) as f:  # a folder or a gs:// prefix
        f.write("x" * int(config.get("size", 10)))
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


class Ws:
    def __init__(self, root: Path, prefix: Path):
        self.root, self.prefix = root, prefix
        self.module = "steps_" + uuid.uuid4().hex[:8]
        root.mkdir(parents=True)
        (root / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.marinbuild]\n")
        (root / f"{self.module}.py").write_text(STEPS)
        (root / "pkg").mkdir()
        (root / "pkg" / "script.py").write_text(SCRIPT)
        self.write()

    def write(self, n: int = 1, fail_c: bool = False) -> None:
        m = self.module
        (self.root / "pkg" / "BUILD.marin").write_text(
            textwrap.dedent(f"""
            load("@marinbuild//rules:python.py", "executor_script", "python_step")
            python_step(name = "a", fn = "{m}:write", config = {{"n": {n}, "size": 100}})
            python_step(name = "b", fn = "{m}:write", config = {{"size": 1000}}, deps = [":a"])
            python_step(name = "c", fn = "{m}:write", config = {{"fail": {fail_c}}})
            executor_script(name = "both", script = "script.py")
        """).lstrip()
        )

    def session(self, *patterns: str) -> Session:
        s = Session.open(self.root, prefix=str(self.prefix))
        s.load(list(patterns) or ["//pkg:b"])
        s.analyse()
        return s

    def build(self, *patterns: str) -> Session:
        s = self.session(*patterns)
        s.engine.run(s.requested_steps())
        return s

    def path_of(self, label: str) -> str:
        s = self.session(label)
        return s.output_paths_of(s.labels[0])[0]


@pytest.fixture
def ws(tmp_path: Path) -> Ws:
    return Ws(tmp_path / "ws", tmp_path / "prefix")


def states(rows):
    return {r.label: r.state for r in rows}


def fake_run(path: str, worker: str, age: float) -> None:
    Path(path).mkdir(parents=True, exist_ok=True)
    st.write_status(path, st.STATUS_RUNNING)
    Path(lease_path(path)).write_bytes(encode_lease(LeaseRecord(worker, time.time() - age)))


def du(path: str) -> tuple[int, int]:
    total = count = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            total += os.path.getsize(os.path.join(dirpath, f))
            count += 1
    return total, count


# -- status ------------------------------------------------------------------------------------


def test_status_missing_built_stale(ws):
    labels = ["//pkg:a", "//pkg:b"]
    rows = cache_status(ws.session(*labels), labels)
    assert states(rows) == {"//pkg:a": "missing", "//pkg:b": "missing"}
    ws.build(*labels)
    s = ws.session(*labels)
    rows = cache_status(s, labels)
    assert states(rows) == {"//pkg:a": "built", "//pkg:b": "built"}
    assert rows[1].output_paths == s.output_paths_of(s.labels[1])
    ws.write(n=2)
    assert states(cache_status(ws.session(*labels), labels)) == {"//pkg:a": "stale", "//pkg:b": "stale"}
    table = format_table(rows)
    assert table.splitlines()[0].split() == ["TARGET", "STATE", "OUTPUT"]
    assert "//pkg:b  built" in table
    assert json.loads(json.dumps([asdict(r) for r in rows]))[0]["state"] == "built"


def test_status_failed_running_damaged(ws):
    ws.write(fail_c=True)
    with pytest.raises(StepFailedError):
        ws.build("//pkg:c")
    fake_run(ws.path_of("//pkg:a"), "host-7", 2.0)
    s = ws.session("//pkg:a", "//pkg:c")
    rows = cache_status(s, ["//pkg:a", "//pkg:c"])
    assert states(rows) == {"//pkg:a": "running", "//pkg:c": "failed"}
    running = rows[0]
    assert running.holder == "host-7" and 1.0 <= running.age < 60
    assert "running (host-7, " in format_table(rows)
    # a stale lease: abandoned, which is not built (missing here: no other version)
    fake_run(ws.path_of("//pkg:a"), "host-7", 10_000)
    (row,) = cache_status(ws.session("//pkg:a"), ["//pkg:a"])
    assert row.state == "missing" and "abandoned" in (row.steps[0].detail or "")
    # damaged lease of a RUNNING step
    Path(lease_path(ws.path_of("//pkg:a"))).write_text("nope")
    (row,) = cache_status(ws.session("//pkg:a"), ["//pkg:a"])
    assert row.state.startswith("damaged: ") and ".executor_status.lock" in row.state


def test_status_damaged_status_is_never_built(ws):
    ws.build("//pkg:a")
    a = ws.path_of("//pkg:a")
    Path(a, st.STATUS_FILE).write_bytes(b"\xff\xfe")
    (row,) = cache_status(ws.session("//pkg:a"), ["//pkg:a"])
    assert row.state.startswith("damaged: ") and os.path.join(a, st.STATUS_FILE) in row.state


def test_status_reads_a_lease_only_when_its_step_is_running(ws):
    """A damaged lease file beside a built step, or where a step was never built, changes nothing: status reads a
    lease only for a RUNNING step (the damaged lease of a running one is reported, above). The number of reads
    per step is counted on GCS (tests/gcs/test_gcs_cache_gc.py)."""
    ws.build("//pkg:a", "//pkg:b")
    s = ws.session("//pkg:a", "//pkg:b", "//pkg:both")
    for label in s.labels:
        for path in s.output_paths_of(label):
            Path(path).mkdir(parents=True, exist_ok=True)
            Path(lease_path(path)).write_text("nope")
    rows = cache_status(s, ["//pkg:a", "//pkg:b", "//pkg:both"])
    assert states(rows) == {"//pkg:a": "built", "//pkg:b": "built", "//pkg:both": "missing"}


def test_status_several_steps(ws):
    ws.build("//pkg:both")
    s = ws.session("//pkg:both")
    (row,) = cache_status(s, ["//pkg:both"])
    assert row.state == "built" and len(row.output_paths) == 2 and len(row.steps) == 2
    Path(row.output_paths[0], st.STATUS_FILE).unlink()
    (row,) = cache_status(ws.session("//pkg:both"), ["//pkg:both"])
    assert row.state == "missing"
    text = format_table([row])
    assert row.output_paths[0] in text and row.output_paths[1] in text


def test_row_aggregation_order():
    def mk(*names):
        return [StepState(f"s{i}", f"/p/s{i}", n) for i, n in enumerate(names)]

    assert target_row("t", mk("built", "stale")).state == "stale"
    assert target_row("t", mk("built", "missing")).state == "missing"
    assert target_row("t", mk("stale", "missing")).state == "stale"
    assert target_row("t", mk("built", "built")).state == "built"
    assert target_row("t", mk("running", "failed")).state == "failed"
    assert target_row("t", mk("running", "built")).state == "running"
    assert target_row("t", mk("failed", "damaged: x")).state == "damaged: x"


# -- show --------------------------------------------------------------------------------------


def test_show_label_and_path(ws):
    s = ws.build()
    b = s.output_paths_of(s.labels[0])[0]
    shown = cache_show(ws.session(), "//pkg:b")
    assert shown["target"] == "//pkg:b"
    (out,) = shown["outputs"]
    assert out["output_path"] == b and out["name"] == "pkg/b" and out["exists"]
    assert out["status"] == "SUCCESS" and out["state"] == "built"
    assert out["info"]["output_path"] == b and out["info"]["version"]["name"] == "pkg/b"
    assert out["artifact"] == {"n": None}
    assert (out["size"], out["files"]) == du(b)
    assert out["lease"] is None and out["errors"] == []
    text = format_show(shown)
    assert "state:     built (SUCCESS)" in text and "target:    //pkg:b" in text
    json.dumps(shown)
    by_path = cache_show(str(ws.prefix), os.path.relpath(b, ws.prefix))
    assert by_path["target"] is None and by_path["outputs"][0]["info"] == out["info"]
    assert cache_show(s, b)["outputs"][0]["size"] == out["size"]


def test_show_lease_damage_and_missing(ws):
    s = ws.session("//pkg:a")
    a = s.output_paths_of(s.labels[0])[0]
    (out,) = cache_show(s, a)["outputs"]
    assert not out["exists"] and out["state"] == "missing" and out["size"] == 0
    fake_run(a, "w1", 3)
    (out,) = cache_show(s, a)["outputs"]
    assert out["state"] == "running" and out["lease"]["holder"] == "w1" and out["lease"]["live"]
    Path(a, ".executor_info").write_text("{broken")
    (out,) = cache_show(s, a)["outputs"]
    assert out["state"].startswith("damaged: ") and ".executor_info" in out["errors"][0]
    assert "error:" in format_show({"target": None, "outputs": [out]})
    with pytest.raises(ValueError):
        cache_show(str(ws.prefix), "//pkg:a")


# -- ls ----------------------------------------------------------------------------------------


def test_ls_sizes_statuses_and_no_descent(ws):
    s = ws.build("//pkg:b")
    a = s.engine.output_paths[s.engine.dependencies[s.steps_of(s.labels[0])[0]][0]]
    b = s.output_paths_of(s.labels[0])[0]
    # a nested folder that looks like a step output inside b is part of b, not an entry
    Path(b, "inner").mkdir()
    Path(b, "inner", ".executor_info").write_text("{}")
    Path(b, "inner", "blob").write_bytes(b"0" * 5000)
    entries = cache_ls(str(ws.prefix))
    assert [e.output_path for e in entries] == [a, b]
    assert [e.name for e in entries] == ["pkg/a", "pkg/b"]
    assert all(e.status == "SUCCESS" for e in entries)
    assert [(e.size, e.files) for e in entries] == [du(a), du(b)]
    assert entries[1].size > 6000
    assert all(e.age is not None and 0 <= e.age < 120 for e in entries)
    text = format_ls(entries)
    assert text.splitlines()[0].split() == ["STATUS", "SIZE", "AGE", "NAME", "OUTPUT"]
    assert "2 output(s)" in text
    assert asdict(entries[0])["output_path"] == a


def test_ls_damaged_and_statusless(ws):
    ws.build("//pkg:a")
    a = ws.path_of("//pkg:a")
    Path(a, st.STATUS_FILE).write_text("WHAT")
    half = ws.prefix / "other" / "half-abcdef"
    half.mkdir(parents=True)
    (half / ".executor_info").write_text("{}")
    entries = {e.name: e for e in cache_ls(str(ws.prefix))}
    assert entries["pkg/a"].status.startswith("damaged: ") and a in entries["pkg/a"].status
    assert entries["other/half"].status is None and entries["other/half"].age is None


def test_ls_and_show_on_an_fsspec_prefix():
    mem = fsspec.filesystem("memory")
    root = f"memory://mb-{uuid.uuid4().hex[:8]}"
    mem.pipe(f"{root}/data/a-123abc/.executor_status", b"SUCCESS")
    mem.pipe(f"{root}/data/a-123abc/.executor_info", json.dumps({"name": "data/a", "version": {}}).encode())
    mem.pipe(f"{root}/data/a-123abc/shard/0.bin", b"x" * 50)
    mem.pipe(f"{root}/data/a-123abc/nested-000000/.executor_status", b"SUCCESS")
    mem.pipe(f"{root}/b-456def/.executor_status", b"RUNNING")
    mem.pipe(f"{root}/b-456def/.executor_status.lock", encode_lease(LeaseRecord("remote", time.time())))
    mem.pipe(f"{root}/experiments/run-000000.json", b"{}")
    entries = cache_ls(root)
    assert [(e.output_path, e.name, e.status) for e in entries] == [
        (f"{root}/b-456def", "b", "RUNNING"),
        (f"{root}/data/a-123abc", "data/a", "SUCCESS"),
    ]
    a = entries[1]
    assert a.files == 4 and a.size == 7 + len(json.dumps({"name": "data/a", "version": {}})) + 50 + 7
    shown = cache_show(root, "b-456def")["outputs"][0]
    assert shown["state"] == "running" and shown["lease"]["holder"] == "remote"
    mem.rm(root.replace("memory://", "/"), recursive=True)


# -- gc ----------------------------------------------------------------------------------------


def test_gc_lists_then_deletes_only_with_yes(ws):
    old = ws.build("//pkg:b")
    old_paths = sorted(old.engine.output_paths.values())
    ws.write(n=2)
    new = ws.build("//pkg:b")
    new_paths = sorted(new.engine.output_paths.values())
    run_infos = sorted(os.listdir(ws.prefix / "experiments"))
    assert len(run_infos) == 2

    listed = cache_gc(ws.session(), ["//pkg:b"], yes=False)
    assert listed.dry_run and listed.deleted == []
    assert sorted(e.output_path for e in listed.candidates) == old_paths
    assert listed.kept == 2 and listed.candidate_bytes == sum(du(p)[0] for p in old_paths)
    assert all(Path(p).exists() for p in old_paths)
    assert "would delete" in format_gc(listed) and "Nothing deleted" in format_gc(listed)
    json.dumps(listed.to_dict())

    done = cache_gc(ws.session(), ["//pkg:b"], yes=True)
    assert sorted(done.deleted) == old_paths and done.freed_bytes == listed.candidate_bytes
    assert not any(Path(p).exists() for p in old_paths)
    assert all(Path(p, st.STATUS_FILE).exists() for p in new_paths)
    assert sorted(os.listdir(ws.prefix / "experiments")) == run_infos
    assert "deleted 2 of 2" in format_gc(done)


def test_a_gc_killed_mid_deletion_leaves_no_step_marked_built_without_its_outputs(ws):
    old = ws.build("//pkg:b")
    old_paths = sorted(old.engine.output_paths.values())
    files = {p: sorted(q for q in Path(p).rglob("*") if q.is_file()) for p in old_paths}
    ws.write(n=2)
    ws.build("//pkg:b")
    env = {k: v for k, v in os.environ.items() if k != "MARIN_PREFIX"}
    command = [sys.executable, "-m", "marinbuild", "cache", "gc", "//pkg:b", "--yes", "--prefix", str(ws.prefix)]
    killed = subprocess.run(
        command, cwd=ws.root, env={**env, "MARINBUILD_KILL_AT_POINT": "1:gc-status-removed"}, capture_output=True
    )
    assert killed.returncode == -9, killed.stderr
    assert any(Path(p).exists() and not Path(p, st.STATUS_FILE).exists() for p in old_paths)  # caught mid-way
    for p in old_paths:  # every step still marked built has all its files
        assert not Path(p, st.STATUS_FILE).exists() or all(f.exists() for f in files[p]), p
    assert subprocess.run(command, cwd=ws.root, env=env, capture_output=True).returncode == 0
    assert not any(Path(p).exists() for p in old_paths)  # the next gc finishes the job


def test_gc_keeps_the_current_outputs_of_every_target_of_the_workspace(ws):
    ws.build("//pkg:b", "//pkg:both")
    result = cache_gc(ws.session(), ["//pkg:b"], yes=True)
    assert result.candidates == [] and result.kept == 4  # pkg/a, pkg/b and the two steps of //pkg:both
    assert {e.name for e in cache_ls(str(ws.prefix))} == {"pkg/a", "pkg/b", "script/left", "script/right"}
    assert format_gc(result).startswith("kept 4 output(s) that current targets of the workspace (//...) use\n")


def test_gc_narrowed_to_the_patterns_keeps_their_dependencies(ws):
    ws.build("//pkg:b", "//pkg:both")
    result = cache_gc(ws.session(), ["//pkg:b"], yes=True, keep_only_used_by_patterns=True)
    names = sorted(Path(p).name.rsplit("-", 1)[0] for p in result.deleted)
    assert names == ["left", "right"]  # pkg/a stays: pkg/b needs it
    assert sorted(result.reasons.values()) == [
        "the current output of script/left (//pkg:both), which //pkg:b does not use",
        "the current output of script/right (//pkg:both), which //pkg:b does not use",
    ]
    assert {e.name for e in cache_ls(str(ws.prefix))} == {"pkg/a", "pkg/b"}


def test_gc_skips_a_folder_with_a_live_lease(ws):
    ws.build("//pkg:a")
    old_a = ws.path_of("//pkg:a")
    ws.write(n=2)
    ws.build("//pkg:a")
    fake_run(old_a, "busy-host", 1.0)
    result = cache_gc(ws.session("//pkg:a"), ["//pkg:a"], yes=True)
    assert [e.output_path for e in result.candidates] == [old_a]
    assert result.deleted == [] and Path(old_a).exists()
    assert result.skipped[0]["output_path"] == old_a and "busy-host" in result.skipped[0]["reason"]
    assert "skipped (live lease held by busy-host" in format_gc(result)
    # once the lease is stale, the folder goes
    fake_run(old_a, "busy-host", 10_000)
    result = cache_gc(ws.session("//pkg:a"), ["//pkg:a"], yes=True)
    assert result.deleted == [old_a] and not Path(old_a).exists()


# -- clean -------------------------------------------------------------------------------------


def test_clean_removes_only_the_workspace_cache(ws):
    s = ws.build("//pkg:a")
    cache = ws.root / ".marinbuild"
    (cache / "compiled").mkdir(parents=True, exist_ok=True)
    (cache / "compiled" / "x.bin").write_bytes(b"123")
    (cache / "stat_cache.json").write_text("{}")
    a = s.output_paths_of(s.labels[0])[0]
    result = clean(s.workspace)
    assert result.removed and result.files >= 2 and result.size >= 5
    assert not cache.exists()
    assert Path(a, st.STATUS_FILE).read_text() == "SUCCESS"
    assert (ws.root / "pkg" / "BUILD.marin").exists()
    assert "outputs are untouched" in format_clean(result)
    again = clean(ws.root)
    assert not again.removed and "nothing to clean" in format_clean(again)
    assert Path(a, st.STATUS_FILE).exists()


SWEEP_STEPS = """
from marinbuild.store import fs


def train(config):
    fs.write_atomic(config["output_path"] + "/checkpoint.bin", b"w" * config["size"])
"""


def sweep_workspace(root: Path, learning_rate: float) -> Path:
    """A workspace whose target //experiments/sweep:train puts its outputs under ``<prefix>/experiments/``."""
    (root / "experiments" / "sweep").mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'sweep'\n\n[tool.marinbuild]\n")
    (root / "sweep_steps.py").write_text(SWEEP_STEPS)
    (root / "experiments" / "sweep" / "BUILD.marin").write_text(
        textwrap.dedent(f"""
        load("@marinbuild//rules:python.py", "python_step")
        python_step(name = "train", fn = "sweep_steps:train", config = {{"lr": {learning_rate}, "size": 4096}})
    """).lstrip()
    )
    return root


def marinbuild_cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, in a subprocess, in workspace ``root`` (the environment passes on, e.g. the GCS emulator)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), *sys.path]))
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=root, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def check_gc_offers_old_outputs_under_experiments(root: Path, prefix: str, listdir: Any) -> None:
    """Build //experiments/sweep:train at two learning rates; gc of the target offers and deletes the old one's
    folder (under ``<prefix>/experiments/``), and leaves the new one and every run info JSON alone."""
    sweep_workspace(root, 0.001)
    marinbuild_cli(root, "//experiments/sweep:train", "--prefix", prefix)
    sweep_workspace(root, 0.002)
    marinbuild_cli(root, "//experiments/sweep:train", "--prefix", prefix)
    folders = sorted(name for name in listdir(prefix + "/experiments/sweep"))
    assert len(folders) == 2
    run_infos = sorted(name for name in listdir(prefix + "/experiments") if name.endswith(".json"))
    assert len(run_infos) == 2
    (new,) = json.loads(
        marinbuild_cli(
            root, "cache", "status", "//experiments/sweep:train", "--prefix", prefix, "--output", "json"
        ).stdout
    )[0]["output_paths"]
    old = prefix + "/experiments/sweep/" + next(f for f in folders if not new.endswith("/" + f))

    listed = json.loads(
        marinbuild_cli(root, "cache", "gc", "//experiments/sweep:train", "--prefix", prefix, "--output", "json").stdout
    )
    assert [c["output_path"] for c in listed["candidates"]] == [old]
    assert listed["candidate_bytes"] >= 4096 and listed["deleted"] == [] and listed["kept"] == 1

    done = json.loads(
        marinbuild_cli(
            root, "cache", "gc", "//experiments/sweep:train", "--prefix", prefix, "--yes", "--output", "json"
        ).stdout
    )
    assert done["deleted"] == [old]
    assert sorted(listdir(prefix + "/experiments/sweep")) == [new.rsplit("/", 1)[1]]
    assert sorted(name for name in listdir(prefix + "/experiments") if name.endswith(".json")) == run_infos


def test_gc_offers_old_outputs_under_experiments(tmp_path):
    check_gc_offers_old_outputs_under_experiments(tmp_path / "ws", str(tmp_path / "prefix"), os.listdir)


def test_gc_never_deletes_a_step_folder_holding_the_run_infos(ws):
    s = ws.build("//pkg:a")
    holder = ws.prefix / "experiments"  # a step whose output folder is <prefix>/experiments itself
    st.write_status(str(holder), st.STATUS_SUCCESS)
    result = cache_gc(s, ["//pkg:a"], yes=True)
    assert result.candidates == [] and result.left == 1  # no target makes it: only gc //... offers it
    result = cache_gc(s, ["//..."], yes=True)
    assert [e.output_path for e in result.candidates] == [str(holder)]
    assert result.deleted == [] and "holds the run info JSONs" in result.skipped[0]["reason"]
    assert any(name.endswith(".json") for name in os.listdir(holder))
