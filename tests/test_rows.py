"""An edit rebuilt from the previous build's rows (``marinbuild.analysis.incremental``): only the affected targets
are analysed, and the outputs, ``.executor_info`` texts and run-info file are the bytes a full analysis makes.
Anything the rows cannot vouch for takes the full path.

Through the real CLI in child processes; the full analysis to compare with runs in this process.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workspaces import age_workspace, write_workspace

REPO = Path(__file__).resolve().parent.parent
LAYERS = 7  # deeper than MAX_INLINE_DEPTH: consumers inline some dependencies' versions and name others
ANALYSED = re.compile(r"analysed (\d+) of (\d+) targets")

STEPS_PY = """
import os


def write(config):
    os.makedirs(config["output_path"], exist_ok=True)
    with open(os.path.join(config["output_path"], "out.txt"), "w") as f:
        f.write(str(config["salt"]))
"""


def _package(layer: int, salt: int) -> str:
    """Layer ``layer``: three targets, each depending on every target of the layer below (in ``p<layer-1>``)."""
    lines = ['load("@marinbuild//rules:python.py", "python_step")']
    for i in range(3):
        deps = [f"//p{layer - 1}:t{j}" for j in range(3)] if layer else []
        value = salt if i == 1 else 0
        lines.append(
            f'python_step(name = "t{i}", fn = "rowsteps:write", config = {{"salt": {value}, "layer": {layer}}}, '
            f"deps = {deps!r})".replace("'", '"')
        )
    return "\n".join(lines) + "\n"


def _workspace(root: Path) -> Path:
    files = {"rowsteps.py": STEPS_PY, **{f"p{layer}/BUILD.marin": _package(layer, 0) for layer in range(LAYERS)}}
    ws = write_workspace(root, files, prefix="../out")
    (ws / ".marinbuild").mkdir()  # made by the first build otherwise: its folder would be too new to sign
    age_workspace(root)
    return ws


def _edit(ws: Path, layer: int, salt: int) -> None:
    _age((ws / f"p{layer}" / "BUILD.marin"), _package(layer, salt))


def _age(path: Path, text: str | None = None) -> None:
    """Write ``text`` to ``path`` (if given) and set its time a minute back: outside the window in which a just
    changed input is not trusted, and still different from the time it had (aged before)."""
    if text is not None:
        path.write_text(text)
    old = time.time() - 60
    os.utime(path, (old, old))


def _marinbuild(ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("MARIN_PREFIX", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a ``__pycache__`` made in the workspace would make the next build racy
    done = subprocess.run(
        [sys.executable, "-m", "marinbuild", "//...", "--explain", *args],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done


def _analysed(done: subprocess.CompletedProcess[str]) -> tuple[int, int] | None:
    found = ANALYSED.search(done.stderr)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _run_info(done: subprocess.CompletedProcess[str]) -> Path:
    found = re.search(r"experiment\?path=(\S+\.json)", done.stderr)
    assert found is not None, done.stderr
    return Path(found.group(1))


def _ran(done: subprocess.CompletedProcess[str]) -> set[str]:
    return set(re.findall(r"^started (\S+) ", done.stdout + done.stderr, re.MULTILINE))


def _full_analysis(ws: Path, prefix: Path) -> tuple[bytes, str, dict[str, str]]:
    """What a full analysis of ``ws`` writes: the run info's steps text and name, and each step's info text."""
    from marinbuild.analysis.session import Session, Settings
    from marinbuild.engine import commit
    from marinbuild.load import Loader
    from marinbuild.load.workspace import find_workspace

    cwd = os.getcwd()
    os.chdir(ws)
    try:
        workspace = find_workspace(".")  # no package cache: this process's entries would not be the CLI's
        session = Session(workspace, Settings.resolve(workspace, prefix=str(prefix)), Loader(workspace))
        session.load(["//..."])
        session.analyse()
        engine = session.engine
        assert engine is not None
        engine.record_infos()
        assert engine.executor_info is not None
        folder = tempfile.mkdtemp()
        path = commit.write_run_info(engine.table, engine.executor_info, folder, only_if_new=False)
        text = Path(path).read_bytes()
        infos = {engine.output_paths[s]: engine.info_text(s) for s in engine.steps}
        shutil.rmtree(folder)
    finally:
        os.chdir(cwd)
    return text[text.index(b'"steps": [') :], Path(path).name.rsplit("-", 1)[1], infos


def test_an_edit_is_analysed_alone_and_writes_what_a_full_analysis_writes(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    prefix = tmp_path / "out"
    assert _analysed(_marinbuild(ws)) is None  # the first build analyses everything
    # p4/t1's dependencies (p3) are inlined into its version; p6/t1's (p5) are deeper, so named. The second build's
    # rows are the first incremental build's own.
    for layer, salt in ((4, 1), (4, 2), (6, 1)):
        _edit(ws, layer, salt)
        done = _marinbuild(ws)
        affected = 1 + 3 * (LAYERS - 1 - layer)  # the edited target and its dependents
        assert _analysed(done) == (affected, 3 * LAYERS), done.stderr
        ran = _ran(done)
        assert f"p{layer}/t1" in ran and f"p{layer}/t0" not in ran and len(ran) == affected
        steps_text, name, infos = _full_analysis(ws, prefix)
        run_info = _run_info(done)
        text = run_info.read_bytes()
        assert run_info.name.rsplit("-", 1)[1] == name
        assert text[text.index(b'"steps": [') :] == steps_text
        for path, info in infos.items():
            assert (Path(path) / ".executor_info").read_text() == info + "\n", path


def test_an_edit_saved_by_renaming_a_new_file_is_analysed_alone(tmp_path: Path) -> None:
    """An editor that writes a new file and renames it over the BUILD file changes the package's folder too: the
    build then loads every package, and still analyses only what the edit affects."""
    ws = _workspace(tmp_path / "ws")
    _marinbuild(ws)
    build = ws / "p4" / "BUILD.marin"
    new = ws / "p4" / ".BUILD.marin.swp"
    new.write_text(_package(4, 1))
    os.replace(new, build)
    _age(build)
    _age(build.parent)
    done = _marinbuild(ws)
    assert _analysed(done) == (1 + 3 * (LAYERS - 5), 3 * LAYERS), done.stderr
    steps_text, name, _infos = _full_analysis(ws, tmp_path / "out")
    text = _run_info(done).read_bytes()
    assert _run_info(done).name.rsplit("-", 1)[1] == name and text[text.index(b'"steps": [') :] == steps_text


def test_a_dry_run_from_rows_plans_every_step(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    _marinbuild(ws)
    _edit(ws, 5, 1)
    done = _marinbuild(ws, "-n")
    assert _analysed(done) == (4, 3 * LAYERS)
    rows = re.findall(r"^(\w+) +(p\d/t\d)  ", done.stdout, re.MULTILINE)
    assert len(rows) == 3 * LAYERS, done.stdout
    assert sorted(name for state, name in rows if state != "built") == ["p5/t1", "p6/t0", "p6/t1", "p6/t2"]


def test_an_edit_affecting_most_of_the_graph_takes_the_full_path(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    _marinbuild(ws)
    _edit(ws, 1, 1)
    assert _analysed(_marinbuild(ws)) is None


def test_a_step_deleted_since_takes_the_full_path_and_is_rebuilt(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    prefix = tmp_path / "out"
    _marinbuild(ws)
    shutil.rmtree(next(prefix.glob("p0/t2-*")))
    _edit(ws, 4, 1)
    done = _marinbuild(ws)
    assert _analysed(done) is None
    assert "p0/t2" in _ran(done) and "p4/t1" in _ran(done)


def test_a_status_rewritten_in_place_since_takes_the_full_path_and_is_rebuilt(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    prefix = tmp_path / "out"
    _marinbuild(ws)
    _edit(ws, 4, 1)
    assert _analysed(_marinbuild(ws)) is not None  # its rows sign every status: checked with one stat next time
    with open(next(prefix.glob("p0/t2-*")) / ".executor_status", "r+b") as status:
        status.write(b"FAILED\n")  # Marin's in-place form: the same file and size
    _edit(ws, 4, 2)
    done = _marinbuild(ws)
    assert _analysed(done) is None
    assert "p0/t2" in _ran(done) and "p4/t1" in _ran(done)


def test_a_run_info_changed_since_or_a_changed_pyproject_takes_the_full_path(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    done = _marinbuild(ws)
    with _run_info(done).open("ab") as f:
        f.write(b" ")
    _edit(ws, 4, 1)
    assert _analysed(_marinbuild(ws)) is None
    _edit(ws, 4, 2)  # the last build wrote rows again
    _age(ws / "pyproject.toml", (ws / "pyproject.toml").read_text() + "# an edit outside any package\n")
    assert _analysed(_marinbuild(ws)) is None


def _files(prefix: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``prefix`` but the run infos: ``relative path -> (inode, mtime_ns, size)``."""
    found = {}
    for path in prefix.rglob("*"):
        if path.is_file() and "experiments" not in path.relative_to(prefix).parts:
            st = path.stat()
            found[str(path.relative_to(prefix))] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return found


def test_a_build_from_rows_rewrites_no_file_of_a_step_it_did_not_run(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    prefix = tmp_path / "out"
    _marinbuild(ws)
    before = _files(prefix)
    _edit(ws, 6, 1)
    done = _marinbuild(ws)
    assert _analysed(done) == (1, 3 * LAYERS)
    after = _files(prefix)
    assert _ran(done) == {"p6/t1"}
    assert {path: after.get(path) for path in before} == before  # the old p6/t1 output included: a new path ran
    (new_folder,) = {"/".join(Path(path).parts[:2]) for path in set(after) - set(before)}
    assert new_folder.startswith("p6/t1-") and not any(path.startswith(new_folder + "/") for path in before)


def test_a_build_from_rows_killed_before_its_run_info_is_named_leaves_the_previous_one(tmp_path: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    prefix = tmp_path / "out"
    first = _run_info(_marinbuild(ws))
    text = first.read_bytes()
    _edit(ws, 6, 1)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("MARIN_PREFIX", None)
    env["MARINBUILD_KILL_AT_POINT"] = "1:before-replace run info __main__"
    killed = subprocess.run(
        [sys.executable, "-m", "marinbuild", "//...", "--explain"], cwd=ws, env=env, capture_output=True, text=True
    )
    # The same edit and environment as test_a_build_from_rows_rewrites_no_file_of_a_step_it_did_not_run, whose build
    # reports the path from rows (fault-injection variables are not part of the recorded environment).
    assert killed.returncode == -9, killed.stderr
    assert sorted(p.name for p in (prefix / "experiments").glob("*.json")) == [first.name]
    assert first.read_bytes() == text
    done = _marinbuild(ws)  # the next build completes: its snapshot has no rows, so it takes the full path
    assert _analysed(done) is None and _run_info(done).name != first.name
    steps_text, name, _infos = _full_analysis(ws, prefix)
    assert _run_info(done).name.rsplit("-", 1)[1] == name


def test_a_full_no_op_finds_the_run_info_of_its_graph_and_records_rows(tmp_path: Path) -> None:
    """A first build whose snapshot was not kept (here: dropped; in a new workspace: its inputs too new to trust)
    leaves the next build, a no-op, to analyse in full: it finds the run info the first wrote for the same graph,
    so the build after an edit analyses only what it affects."""
    ws = _workspace(tmp_path / "ws")
    first = _run_info(_marinbuild(ws))
    shutil.rmtree(ws / ".marinbuild" / "snapshots")
    noop = _marinbuild(ws)
    assert "experiment?path=" not in noop.stderr and not _ran(noop)  # nothing ran, no run info written
    (rows_file,) = (ws / ".marinbuild" / "snapshots").glob("*.rows")
    assert rows_file.is_file()
    _edit(ws, 6, 1)
    done = _marinbuild(ws)
    assert _analysed(done) == (1, 3 * LAYERS), done.stderr
    steps_text, name, _infos = _full_analysis(ws, tmp_path / "out")
    text = _run_info(done).read_bytes()
    assert _run_info(done).name.rsplit("-", 1)[1] == name and text[text.index(b'"steps": [') :] == steps_text
    assert first.is_file()


def test_rows_keep_the_saved_md5_states_of_their_run_info(tmp_path: Path) -> None:
    """The states a splice saved (``store/run_info_splice.py``) come back with the rows, for the next splice."""
    from marinbuild.analysis import rows
    from marinbuild.analysis.snapshot import SnapshotKey, signature

    run_info = tmp_path / "exp-abcdef.json"
    run_info.write_text("{}")
    key = SnapshotKey(str(tmp_path), "", ("//...",), str(tmp_path / "out"), "local")
    table = rows.RowTable(
        str(tmp_path / "out"), [("a", str(tmp_path / "out/a-000000"), "0" * 64, False, "0" * 32, 0, 4, 9)]
    )
    labels = rows.LabelTable({"//:a": ((0,), (), "")})
    states = [(1, bytes(range(92)))]
    written = rows.Rows("b1", str(run_info), signature(str(run_info)), ["//:a"], table, labels, states)
    assert rows.write(key, tmp_path, written)
    loaded = rows.load(key, tmp_path, "b1")
    assert loaded is not None and loaded.md5_states == states
    assert rows.load(key, tmp_path, "another build") is None
