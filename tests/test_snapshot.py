"""The analysis snapshot: a no-op build skips loading and analysis, and any change falls back to the full path."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from workspaces import age_workspace

from marinbuild.analysis import snapshot
from marinbuild.cli import main

STEPS_PY = """
import os


def write(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["output_path"] + "\\n")
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(str(config.get("text", "")) + str(len(config["srcs"])))
"""

RULES_PY = """
import os

from marinbuild.load import attr, rule

FLAVOR = os.environ.get("MB_FLAVOR", "plain")


def _impl(ctx):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(ctx.output_path + "\\n")
    os.makedirs(ctx.output_path, exist_ok=True)
    with open(os.path.join(ctx.output_path, "out.txt"), "w") as f:
        f.write(ctx.attr.text)


flavored = rule(implementation=_impl, attrs={"text": attr.string(default=FLAVOR)})
"""

BUILD = """
load("@marinbuild//rules:python.py", "python_step")
load("//rules:flavor.py", "flavored")
load("//lib:consts.star", "TEXT")

print("the BUILD file of //pipe was evaluated")

python_step(name = "a", fn = "snapshot_steps:write", config = {"text": TEXT}, srcs = glob(["data/*.txt"]))
python_step(name = "b", fn = "snapshot_steps:write", config = {"text": "B"}, deps = [":a"])
flavored(name = "f")
"""


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "ws"
    for folder in ("pipe/data", "rules", "lib"):
        (root / folder).mkdir(parents=True)
    (root / "pyproject.toml").write_text('[project]\nname = "w"\n\n[tool.marinbuild]\nprefix = "../out"\n')
    (root / "snapshot_steps.py").write_text(STEPS_PY)
    (root / "rules" / "flavor.py").write_text(RULES_PY)
    (root / "lib" / "consts.star").write_text('TEXT = "A"\n')
    (root / "pipe" / "BUILD.marin").write_text(textwrap.dedent(BUILD))
    (root / "pipe" / "data" / "a.txt").write_text("data-a\n")
    calls = tmp_path / "calls.log"
    calls.touch()
    monkeypatch.setenv("MB_CALLS", str(calls))
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    monkeypatch.delenv("MB_FLAVOR", raising=False)
    monkeypatch.chdir(root)
    # Files written by a test are seconds old at most: trust them (the racy rule has its own test).
    monkeypatch.setattr(snapshot, "RACY_NS", 0)
    return root


PROBE = "the BUILD file of //pipe was evaluated"
"""What the workspace's BUILD file ``print()``s (marinbuild's ``marinbuild.build`` logger) each time it is evaluated."""


class Runs:
    """Runs the CLI in-process and tells whether the snapshot answered: then the build succeeded, no BUILD file
    was evaluated (the BUILD file's ``print()`` logged nothing) and no snapshot was written (a full path that
    succeeds writes one)."""

    def __init__(self, root: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
        self.snapshots = root / ".marinbuild" / "snapshots"
        self.caplog, self.capsys = caplog, capsys
        caplog.set_level(logging.INFO, logger="marinbuild.build")

    def written(self) -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in self.snapshots.glob("*.bin")}

    def __call__(self, *args: str) -> tuple[int, str, str, bool]:
        """Exit code, stdout, stderr, and whether the snapshot answered."""
        before = self.written()
        self.caplog.clear()
        code = main(list(args))
        out, err = self.capsys.readouterr()
        evaluated = any(PROBE in record.getMessage() for record in self.caplog.records)
        return code, out, err, code == 0 and not evaluated and self.written() == before


@pytest.fixture
def runs(ws: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> Runs:
    return Runs(ws, caplog, capsys)


def calls() -> list[str]:
    path = Path(os.environ["MB_CALLS"])
    names = [Path(p).name.rsplit("-", 1)[0] for p in path.read_text().split()]
    path.write_text("")
    return names


def _bump(path: Path, text: str) -> None:
    """Write ``text`` with an mtime certainly different from the previous one."""
    path.write_text(text)
    earlier = time.time() - 100  # not in the future: later snapshots in this process would not trust it
    os.utime(path, (earlier, earlier))


def _prime(runs: Runs, *args: str) -> None:
    """Build, then a no-op through the full path (which writes the snapshot), then a hit."""
    assert runs(*args)[0] == 0
    assert runs(*args)[0] == 0
    calls()
    code, _, _, hit = runs(*args)
    assert code == 0 and hit and calls() == []


def _timeless(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if " in " not in line and "time" not in line)


def test_a_hit_runs_nothing_loads_nothing_and_reports_as_the_full_path(ws: Path, runs: Runs, tmp_path: Path) -> None:
    assert runs("//pipe:all")[0] == 0
    assert sorted(calls()) == ["a", "b", "f"]
    outputs: dict[bool, list[str]] = {}
    events: dict[bool, list[dict[str, object]]] = {}
    for attempt in range(2):
        bep = tmp_path / f"events{attempt}.jsonl"
        code, out, err, hit = runs("//pipe:all", "--build_event_json_file", str(bep))
        assert code == 0 and hit == (attempt == 1) and calls() == []
        outputs[hit] = [out, _timeless(err)]
        lines = bep.read_text().splitlines()
        events[hit] = [{k: v for k, v in json.loads(line).items() if k != "time"} for line in lines]
    assert outputs[True] == outputs[False]
    assert events[True] == events[False]
    assert [e["kind"] for e in events[True]] == ["planned"] * 3 + ["build_started", "build_finished"]

    code, out, _, hit = runs("--output", "json", "//pipe:all")
    assert code == 0 and hit
    result = json.loads(out)
    assert [p["state"] for p in result["plan"]] == ["built"] * 3
    assert [t["label"] for t in result["targets"]] == ["//pipe:a", "//pipe:b", "//pipe:f"]
    assert result["dry_run"] is False

    code, dry, _, hit = runs("-n", "--explain", "//pipe:all")
    assert code == 0 and hit
    assert sorted(line.split()[0] for line in dry.splitlines() if "pipe/" in line and "->" not in line) == ["built"] * 3


EDITS: list[tuple[str, Callable[[Path], None]]] = [
    ("build file", lambda ws: _bump(ws / "pipe/BUILD.marin", (ws / "pipe/BUILD.marin").read_text() + "\n# more\n")),
    ("loaded file", lambda ws: _bump(ws / "lib/consts.star", 'TEXT = "A2"\n')),
    ("rules module", lambda ws: _bump(ws / "rules/flavor.py", RULES_PY.replace('"plain"', '"spicy"'))),
    ("source file", lambda ws: _bump(ws / "pipe/data/a.txt", "data-a, edited\n")),
    ("new file matching a glob", lambda ws: (ws / "pipe/data/b.txt").write_text("b\n")),
    ("pyproject", lambda ws: _bump(ws / "pyproject.toml", (ws / "pyproject.toml").read_text() + "\n")),
    ("new sub-package", lambda ws: (ws / "pipe/data/BUILD.marin").write_text("")),
    ("deleted output", lambda ws: _remove_output(ws, "b")),
    ("failed output", lambda ws: _set_status(ws, "a", "FAILED")),
]


def _output(ws: Path, name: str) -> Path:
    return next((ws.parent / "out" / "pipe").glob(f"{name}-*"))


def _remove_output(ws: Path, name: str) -> None:
    import shutil

    shutil.rmtree(_output(ws, name))


def _set_status(ws: Path, name: str, status: str) -> None:
    (_output(ws, name) / ".executor_status").write_text(status)


@pytest.mark.parametrize("edit", [e[1] for e in EDITS], ids=[e[0] for e in EDITS])
def test_every_change_takes_the_full_path(ws: Path, runs: Runs, edit: Callable[[Path], None]) -> None:
    _prime(runs, "//pipe:all")
    edit(ws)
    code, _, err, hit = runs("//pipe:all")
    assert not hit, err
    assert code in (0, 2), err  # a new sub-package makes data/a.txt cross into it: a BUILD error


def test_flags_and_environment_are_part_of_the_key(ws: Path, runs: Runs, monkeypatch: pytest.MonkeyPatch) -> None:
    _prime(runs, "//pipe:all")
    assert not runs("//pipe:all", "--prefix", str(ws.parent / "elsewhere"))[3]
    assert not runs("//pipe:a")[3]  # other patterns: another snapshot
    monkeypatch.setenv("MARIN_PREFIX", str(ws.parent / "third"))
    assert not runs("//pipe:all")[3]
    monkeypatch.delenv("MARIN_PREFIX")
    assert runs("//pipe:all")[3]
    assert runs("//pipe:all", "-j", "2", "-k")[3]  # flags that do not change analysis share it
    monkeypatch.chdir(ws / "pipe")
    assert not runs(":all")[3]


def build_in_new_process(ws: Path, target: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``marinbuild target`` in a new process in ``ws``, as a user runs it (in-process, rules modules stay imported),
    with ``env`` added to this one's but for the prefix and view URL; ``RACY_NS = 0`` there, since marinbuild's own
    sources may have been edited seconds ago (they are inputs too)."""
    base = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARINBUILD_SERVE_URL")}
    code = (
        "import sys; from marinbuild.analysis import snapshot; snapshot.RACY_NS = 0; from marinbuild.cli import main; "
        f"sys.exit(main([{target!r}]))"
    )
    command = [sys.executable, "-c", code]
    return subprocess.run(command, cwd=ws, env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_environment_variables_read_by_analysis_invalidate(tmp_path: Path, ws: Path) -> None:
    """As separate processes, as a user runs it (in-process, rules modules stay imported)."""
    age_workspace(ws)

    def build(flavor: str) -> str:
        done = build_in_new_process(ws, "//pipe:f", MB_FLAVOR=flavor)
        assert done.returncode == 0, done.stderr
        return done.stdout

    build("sweet")
    build("sweet")
    snapshots = list((ws / ".marinbuild" / "snapshots").glob("*.bin"))
    assert len(snapshots) == 1
    written = snapshots[0].stat().st_mtime_ns
    calls()
    build("sweet")
    assert calls() == []
    assert snapshots[0].stat().st_mtime_ns == written  # answered from the snapshot, not rewritten
    build("sour")
    assert calls() == ["f"]
    f_dirs = sorted((tmp_path / "out" / "pipe").glob("f-*"))
    assert len(f_dirs) == 2


def test_a_build_exporting_the_serve_url_is_still_answered_from_its_snapshot(tmp_path: Path, ws: Path) -> None:
    """The CLI exports ``$MARINBUILD_SERVE_URL`` after the lookup: the snapshot holds the environment the lookup saw,
    so the next build (a new process, without that variable yet) is answered from it."""
    with open(ws / "pyproject.toml", "a") as f:
        f.write('serve_url = "http://view.example"\n')
    age_workspace(ws)

    def build() -> None:
        done = build_in_new_process(ws, "//pipe:all")
        assert done.returncode == 0, done.stderr

    build()
    build()
    (written,) = (ws / ".marinbuild" / "snapshots").glob("*.bin")
    before = written.stat().st_mtime_ns
    build()
    assert written.stat().st_mtime_ns == before  # answered from the snapshot, not rewritten


def test_a_new_terminal_keeps_the_snapshot_but_a_real_variable_does_not(tmp_path: Path, ws: Path) -> None:
    """The shell's own bookkeeping (``OLDPWD``, ``SHLVL``, ``_``, SSH session names) differs between two terminals
    and is not part of the recorded environment; any other variable is."""
    age_workspace(ws)

    def build(extra: dict[str, str]) -> None:
        done = build_in_new_process(ws, "//pipe:all", **extra)
        assert done.returncode == 0, done.stderr

    build({"SHLVL": "1", "OLDPWD": "/"})  # runs the steps
    build({"SHLVL": "1", "OLDPWD": "/"})  # a no-op that writes the snapshot
    (written,) = (ws / ".marinbuild" / "snapshots").glob("*.bin")
    before = written.stat().st_mtime_ns
    build({"SHLVL": "3", "OLDPWD": "/tmp", "SSH_TTY": "/dev/pts/7", "_": "/usr/bin/env"})
    assert written.stat().st_mtime_ns == before  # answered from the snapshot
    build({"SHLVL": "3", "MB_UNRELATED": "1"})
    assert written.stat().st_mtime_ns != before  # a real variable changed: the full path wrote a new snapshot


def test_a_hit_evaluates_no_build_file(ws: Path) -> None:
    """Through the real CLI in new processes: once a no-op has written the snapshot, the BUILD file is replaced by
    a broken one with the signature the snapshot recorded (same size, inode and mtime). The next build is answered
    from the snapshot (exit 0, the same result); loading the workspace would have failed on the broken file, as
    the build after its mtime changes does."""
    old = age_workspace(ws)

    def build() -> subprocess.CompletedProcess[str]:
        return build_in_new_process(ws, "//pipe:all")

    assert build().returncode == 0  # runs the steps
    noop = build()  # a no-op through the full path: writes the snapshot
    assert noop.returncode == 0, noop.stderr
    calls()
    build_file = ws / "pipe" / "BUILD.marin"
    recorded = build_file.stat()
    broken = b'fail("the BUILD file was evaluated")\n'
    size = len(build_file.read_bytes())
    with open(build_file, "r+b") as f:  # in place: the same inode
        f.write(broken + b"#" * (size - len(broken) - 1) + b"\n")
    os.utime(build_file, ns=(recorded.st_atime_ns, recorded.st_mtime_ns))
    assert snapshot.signature(str(build_file)) == (recorded.st_mtime_ns, recorded.st_size, recorded.st_ino)

    hit = build()
    assert hit.returncode == 0, hit.stderr
    assert hit.stdout == noop.stdout and calls() == []

    os.utime(build_file, (old + 1, old + 1))  # now the snapshot no longer answers: the full path loads the file
    loaded = build()
    assert loaded.returncode == 2 and "the BUILD file was evaluated" in loaded.stderr, loaded.stderr


def test_recently_changed_inputs_write_no_snapshot(ws: Path, runs: Runs, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(snapshot, "RACY_NS", 60_000_000_000)
    assert runs("//pipe:all")[0] == 0
    assert runs("//pipe:all")[0] == 0
    assert not (ws / ".marinbuild" / "snapshots").exists()
    assert not runs("//pipe:all")[3]


def test_a_broken_snapshot_is_ignored(ws: Path, runs: Runs) -> None:
    _prime(runs, "//pipe:all")
    for path in (ws / ".marinbuild" / "snapshots").glob("*.bin"):
        path.write_bytes(b"garbage")
    code, _, _, hit = runs("//pipe:all")
    assert code == 0 and not hit


def test_recording_leaves_the_process_alone(ws: Path) -> None:
    """Recording sets no audit hook and keeps ``os.environ`` the same object; the loader says what it listed."""
    from marinbuild.load.loader import Loader
    from marinbuild.load.workspace import find_workspace

    environ = os.environ
    with snapshot.Recorder() as recorder:
        loader = Loader(find_workspace(ws))
        loader.load_patterns(["//..."])
        assert os.environ is environ
    assert recorder.env == snapshot.analysis_environment()
    listed = set(loader.folders_listed())
    assert {str(ws), str(ws / "pipe"), str(ws / "pipe" / "data"), str(ws / "lib")} <= listed
    watch = (
        "import sys\nadded = []\nsys.addaudithook(lambda event, args: added.append(event == 'sys.addaudithook'))\n"
        "from marinbuild.analysis import snapshot\nwith snapshot.Recorder(): pass\nprint(sum(added))"
    )
    done = subprocess.run([sys.executable, "-c", watch], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]  # no audit hook added after ours


def test_a_new_folder_under_a_recursive_pattern_takes_the_full_path(ws: Path, runs: Runs) -> None:
    """A package appearing in a folder no target's source lives in is seen through the folders ``//...`` listed."""
    (ws / "other" / "deep").mkdir(parents=True)
    _prime(runs, "//...")
    (ws / "other" / "deep" / "BUILD.marin").write_text("")
    assert not runs("//...")[3]


def test_remote_prefixes_but_gcs_and_ray_do_not_use_snapshots() -> None:
    assert snapshot.eligible("/tmp/x", "local")
    assert snapshot.eligible("file:///tmp/x", "local")
    assert snapshot.eligible("gs://bucket/x", "local")  # tests/gcs/test_gcs_snapshot.py
    assert not snapshot.eligible("s3://bucket/x", "local")
    assert not snapshot.eligible("gs://bucket/x", "ray")
    assert not snapshot.eligible("/tmp/x", "ray")
