"""``cache verify``: modified, truncated and deleted outputs are found, reported and rebuilt (GCS and local)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gcs_pipelines as gp
import pytest

from marinbuild.cache.verify import (
    DAMAGED,
    DELETED,
    MODIFIED,
    NOT_BUILT,
    OK,
    REPORT_FILE,
    TRUNCATED,
    UNVERIFIED,
    format_verify,
    verify_outputs,
)
from marinbuild.store import action_cache, fs, manifest
from marinbuild.store import status as st


@pytest.fixture(autouse=True)
def clear_calls():
    gp.CALLS.clear()


def _graph() -> list:
    a = gp.step("v/a", "aaaa")
    b = gp.step("v/b", "bbbb", extra_files=2)
    c = gp.step("v/c", "cccc", inputs=[a])
    return [a, b, c]


def test_verify_finds_damage_on_gcs_and_the_next_build_reruns_it(gs_prefix):
    a, b, c = _graph()
    ex = gp.executor(gs_prefix)
    ex.run([b, c])
    out = {s: ex.output_paths[s] for s in (a, b, c)}
    assert {s.state for s in verify_outputs(list(out.values())).steps} == {OK}

    fs.write_atomic(out[a] + "/out.txt", b"AAAA")  # same size, other bytes
    fs.write_atomic(out[b] + "/parts/part-1.txt", b"bbbb-1\n")  # truncated
    fs.remove(out[c] + "/out.txt")  # deleted
    fs.write_atomic(out[c] + "/new.txt", b"added later")
    report = verify_outputs(list(out.values()))
    by_path = {s.output_path: s for s in report.steps}
    assert [(p.kind, p.path) for p in by_path[out[a]].problems] == [(MODIFIED, "out.txt")]
    assert [(p.kind, p.path) for p in by_path[out[b]].problems] == [(TRUNCATED, "parts/part-1.txt")]
    assert [(p.kind, p.path) for p in by_path[out[c]].damage] == [(DELETED, "out.txt")]
    assert all(s.state == DAMAGED and s.invalidated for s in report.steps)
    assert report.exit_code == 1
    text = format_verify(report)
    assert "truncated  parts/part-1.txt" in text and "next build reruns it" in text

    # Never silently used: the damaged steps are not built any more, and the next build reruns them.
    assert all(st.read_status(p) is None for p in out.values())
    left = json.loads(fs.read_bytes(out[b] + "/" + REPORT_FILE))
    assert left["problems"][0]["kind"] == TRUNCATED and left["problems"][0]["path"] == "parts/part-1.txt"
    gp.CALLS.clear()
    again = gp.executor(gs_prefix)
    again.run([b, c])
    assert sorted(gp.CALLS) == sorted(out.values())
    assert fs.read_bytes(out[c] + "/out.txt") == b"aaaa+cccc"
    assert {s.state for s in verify_outputs(list(out.values())).steps} == {OK}


def test_verify_reports_damaged_records_and_unverified_steps(gs_prefix):
    a, b, c = _graph()
    ex = gp.executor(gs_prefix)
    ex.run([a, b])
    record = action_cache.record_path(ex.output_paths[a], action_cache.version_digest(ex.version_strs[a]))
    fs.write_atomic(record, b"{garbage")  # the record holds the manifest
    ex.compute_version(c)
    st.write_status(ex.output_paths[c], st.STATUS_SUCCESS)  # as Marin leaves it: no manifest
    missing = gs_prefix + "/v/never-000000"
    report = verify_outputs([ex.output_paths[a], ex.output_paths[b], ex.output_paths[c], missing], repair=False)
    states = [s.state for s in report.steps]
    assert states == [DAMAGED, OK, UNVERIFIED, NOT_BUILT]
    assert f"{record}: action-cache record is not" in report.steps[0].error
    assert not report.steps[0].invalidated and st.read_status(ex.output_paths[a]) == st.STATUS_SUCCESS


def test_verify_on_a_local_prefix(prefix):
    import pipelines as pl

    a = pl.step("lv/a", "hello")
    b = pl.step("lv/b", "world", inputs=[a])
    from marinbuild.executor import Executor

    ex = Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[])
    ex.run([b])
    pa, pb = ex.output_paths[a], ex.output_paths[b]
    assert [f.path for f in manifest.read_manifest(pa).files] == ["out.txt"]
    Path(pb, "out.txt").write_text("hello+worle")
    report = verify_outputs([pa, pb])
    assert [s.state for s in report.steps] == [OK, DAMAGED]
    assert not Path(pb, ".executor_status").exists() and Path(pa, ".executor_status").exists()
    pl.CALLS.clear()
    Executor(prefix=prefix, executor_info_base_path=os.path.join(prefix, "experiments"), listeners=[]).run([b])
    assert pl.CALLS == [pb]
    assert Path(pb, "out.txt").read_text() == "hello+world"


def test_verify_cache_resolves_targets_through_a_session(tmp_path, monkeypatch):
    """The CLI's entry point: ``verify_cache(session, patterns)``, then ``format_verify``."""
    from marinbuild.analysis.session import Session
    from marinbuild.cache.verify import verify_cache

    root = gp.workspace(tmp_path / "ws")
    monkeypatch.setenv("MB_CALLS", str(tmp_path / "calls.log"))
    monkeypatch.chdir(root)
    session = Session.open(".", prefix=str(tmp_path / "out"))
    session.load(["//pipe:b"])
    session.analyse()
    session.engine.run(session.requested_steps())
    report = verify_cache(Session.open(".", prefix=str(tmp_path / "out")), ["//pipe/..."])
    states = {(s.label, s.state) for s in report.steps}
    assert states == {("//pipe:a", OK), ("//pipe:b", OK), ("//pipe:other", NOT_BUILT)}
    out_a = next(s.output_path for s in report.steps if s.label == "//pipe:a")
    Path(out_a, "out.txt").write_text("X")
    report = verify_cache(Session.open(".", prefix=str(tmp_path / "out")), ["//pipe:a"], repair=False)
    found = [(s.label, s.state, [p.kind for p in s.problems]) for s in report.steps]
    assert found == [("//pipe:a", DAMAGED, [MODIFIED])]
    assert "//pipe:a" in format_verify(report) and report.exit_code == 1
