"""``marinbuild.analysis.build`` over the engine's ``build``: a build returns its result as data and prints nothing;
the requests it refuses are one line and exit 2 through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from workspaces import age_workspace, two_step_workspace

from marinbuild.analysis.build import BuildRequest, EventLogPlace, run_build
from marinbuild.cli import main
from marinbuild.engine.build import BuildResult
from marinbuild.run.events import Event, Listener


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = two_step_workspace(tmp_path / "ws", "flow_steps")
    age_workspace(root)
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    monkeypatch.chdir(root)
    return root


class Recording:
    """``BuildListeners`` that keep every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.opened: list[EventLogPlace] = []
        self.closed = 0
        self.refusals: list[Exception] = []

    def open(self, event_log: EventLogPlace, session: object) -> list[Listener]:
        self.opened.append(event_log)
        return [self.events.append]

    def refused(self, error: Exception) -> None:
        self.refusals.append(error)

    def close(self) -> None:
        self.closed += 1


def build(*patterns: str) -> tuple[BuildResult, Recording]:
    listeners = Recording()
    _session, result = run_build(BuildRequest(patterns=patterns), listeners)
    return result, listeners


def test_a_build_returns_its_result_and_prints_nothing(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ran, heard = build("//pipe:all")
    assert capsys.readouterr() == ("", "")
    assert ran.failure is None
    assert [label for label, _path in ran.requested] == ["//pipe:a", "//pipe:b"]
    assert ran.plan is not None and [row.step.name for row in ran.plan] == ["pipe/a", "pipe/b"]
    assert ran.would_run == ["pipe/a", "pipe/b"]
    assert sorted(step.name for step in ran.succeeded) == ["pipe/a", "pipe/b"]
    assert heard.opened == [EventLogPlace(ws / ".marinbuild", ["//pipe:all"], str(ws / "out"))] and heard.closed == 1

    noop, noop_heard = build("//pipe:all")
    assert capsys.readouterr() == ("", "")
    assert noop.would_run == [] and noop.succeeded == [] and noop.requested == ran.requested
    assert noop.plan is not None and [(r.step.name, r.state) for r in noop.plan] == [
        ("pipe/a", "built"),
        ("pipe/b", "built"),
    ]
    assert [(e.kind, e.step, e.detail) for e in noop_heard.events if e.kind == "planned"] == [
        ("planned", "pipe/a", "built"),
        ("planned", "pipe/b", "built"),
    ]
    assert noop_heard.opened == heard.opened and noop_heard.closed == 1


def test_a_failed_step_is_in_the_result(ws: Path) -> None:
    (ws / "flow_boom.py").write_text("def boom(config):\n    raise RuntimeError('boom')\n")
    with open(ws / "pipe" / "BUILD.marin", "a") as f:
        f.write('python_step(name = "bad", fn = "flow_boom:boom", config = {"text": "X"})\n')
    result, heard = build("//pipe:bad")
    assert result.failure is not None and "pipe/bad" in str(result.failure)
    assert result.succeeded == [] and heard.closed == 1
    assert [(e.step, str(e.error)) for e in heard.events if e.kind == "failed"] == [
        ("pipe/bad", "pipe/bad: RuntimeError: boom")
    ]


def test_no_matching_target_is_one_line_and_exit_2(ws: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["//pipe:all", "-//pipe:all"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "marinbuild: error: no targets match //pipe:all -//pipe:all\n"
    assert not (ws / "out").exists()


def test_rebuilding_a_target_the_build_does_not_analyse_is_one_line_and_exit_2(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["//pipe:a", "--rebuild", "//pipe:b"])  # b needs a; a does not need b == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "marinbuild: error: --rebuild //pipe:b: //pipe:b is not built by this command; add it to the targets\n"
    )
    assert not (ws / "out").exists()


def test_a_built_path_holding_another_versions_outputs_is_one_line_and_exit_2(
    ws: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 6-hex path collision found at planning (the path is built, by another version string): one line naming
    the path and what to do, exit 2, and nothing runs or is recorded over the other version's outputs."""
    from pipelines import pretend_another_version_built

    first, _heard = build("//pipe:a")
    engine = first.engine
    (step,) = first.succeeded
    path = engine.output_paths[step]
    pretend_another_version_built(path, engine.version_strs[step], "e" * 64)
    capsys.readouterr()
    assert main(["//pipe:a"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"marinbuild: error: output path collision at {path}: step pipe/a ") and (
        "rename the step or set override_output_path" in err
    )
    assert (Path(path) / "out.txt").read_text() == "A"
