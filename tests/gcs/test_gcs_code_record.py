"""The record of the code a step ran, on a ``gs://`` prefix (fake-gcs-server, the real CLI in a subprocess).

A no-op checks every built step's record by the md5 listings give (``store.batch.read_md5s``): its requests do not
grow with the steps; a dry run sends none for them. A step whose code outside its key changed is reported (its
record read to name the files), not rebuilt, and a step without a record has nothing to say."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from workspaces import write_workspace

from marinbuild.engine.code_records import CODE_RECORD, record_bytes
from marinbuild.store import batch, gcs

HERE = Path(__file__).parent
REPO = HERE.parent.parent
STEPS = """
import os


def write(config):
    with open(os.environ["MB_CALLS"], "a") as f:
        f.write(config["name"] + "\\n")
    from marinbuild.store import fs

    fs.write_atomic(config["output_path"] + "/out.txt", config["name"].encode())
"""
BUILD = """
load("@marinbuild//rules:python.py", "python_step")

python_step(name = "loose1", fn = "gcs_code_steps:write", config = {"name": "loose1"}, code_in_key = False)
python_step(name = "loose2", fn = "gcs_code_steps:write", config = {"name": "loose2"}, code_in_key = False)
python_step(name = "keyed", fn = "gcs_code_steps:write", config = {"name": "keyed"})
"""


def _mb(ws: Path, prefix: str, calls: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``marinbuild ARGS //... --prefix PREFIX`` (a build without ``args``)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARINBUILD_SERVE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env["MB_CALLS"] = str(calls)
    command = [sys.executable, "-m", "marinbuild", *args, "//...", "--prefix", prefix]
    return subprocess.run(command, cwd=ws, env=env, capture_output=True, text=True, timeout=120)


def test_changed_code_outside_the_key_is_reported_on_gcs(gs_prefix: str, tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"gcs_code_steps.py": STEPS, "pipe/BUILD.marin": BUILD})
    calls = tmp_path / "calls.log"
    assert _mb(ws, gs_prefix, calls).returncode == 0
    assert sorted(calls.read_text().split()) == ["keyed", "loose1", "loose2"]
    (record,) = gcs.filesystem().glob(gs_prefix + "/pipe/loose2-*/.marinbuild_code.json")
    gcs.filesystem().rm(record)  # built before code was recorded: nothing to say about it
    calls.write_text("")
    steps = ws / "gcs_code_steps.py"
    steps.write_text(steps.read_text() + "\n# a comment\n")

    done = _mb(ws, gs_prefix, calls)
    assert done.returncode == 0, done.stderr
    assert calls.read_text().split() == ["keyed"]
    warnings = [line for line in done.stderr.splitlines() if "warning: code changed" in line]
    assert len(warnings) == 1 and "1 output(s)" in warnings[0] and "gcs_code_steps.py" in warnings[0], done.stderr
    sentence = "code changed since this output was built: gcs_code_steps.py"
    why = _mb(ws, gs_prefix, calls, "why")
    assert why.returncode == 0, why.stderr
    assert why.stdout.count(sentence) == 1, why.stdout
    assert sentence in why.stdout.split("//pipe:loose1", 1)[1].split("//pipe:", 1)[0], why.stdout
    status = _mb(ws, gs_prefix, calls, "cache", "status")
    assert status.returncode == 0, status.stderr
    assert f"//pipe:loose1: {sentence}" in status.stdout and status.stdout.count(sentence) == 1, status.stdout


def _noop_requests(tmp_path: Path, prefix: str, steps: int, proxy, *args: str) -> int:
    """Requests of a no-op build of ``steps`` built steps of one package (built first, not counted); ``args``: its
    flags (``-n``: a dry run)."""
    targets = "\n".join(
        f'python_step(name = "s{i}", fn = "gcs_code_steps:write", config = {{"name": "s{i}"}}, code_in_key = False)'
        for i in range(steps)
    )
    build = 'load("@marinbuild//rules:python.py", "python_step")\n\n' + targets + "\n"
    name = f"{steps}{''.join(args)}"
    ws = write_workspace(tmp_path / f"ws{name}", {"gcs_code_steps.py": STEPS, "pipe/BUILD.marin": build})
    calls = tmp_path / f"calls{name}.log"
    assert _mb(ws, prefix, calls).returncode == 0
    assert len(calls.read_text().split()) == steps
    proxy.reset()
    done = _mb(ws, prefix, calls, *args)
    assert done.returncode == 0, done.stderr
    assert args or f"0 steps to run, {steps} already built" in done.stderr, done.stderr
    assert "code changed" not in done.stderr, done.stderr
    return proxy.stats()["requests"]


def test_a_noop_sends_as_many_requests_for_12_built_steps_as_for_4(gs_prefix: str, tmp_path: Path, proxy) -> None:
    """Statuses and code records come from listings (a listing per few hundred steps of a folder), not a GET per
    step: the no-op of 12 steps sends what the no-op of 4 does."""
    proxy.activate()
    few = _noop_requests(tmp_path, gs_prefix + "/few", 4, proxy)
    many = _noop_requests(tmp_path, gs_prefix + "/many", 12, proxy)
    assert few == many, (few, many)


def test_a_dry_run_sends_no_request_for_code_records(gs_prefix: str, tmp_path: Path, proxy) -> None:
    """A dry run reads the statuses only: the no-op's listings of the code records' md5s and of the compute records'
    names (what the build reused, ``run/compute.py``) are not sent."""
    proxy.activate()
    noop = _noop_requests(tmp_path, gs_prefix + "/noop", 12, proxy)
    dry = _noop_requests(tmp_path, gs_prefix + "/dry", 12, proxy, "-n")
    assert dry == noop - 2, (noop, dry)


def test_read_md5s_gives_the_listed_md5_of_each_folders_object(gs_prefix: str, tmp_path: Path) -> None:
    """Folders grouped in a listing (5 in ``grouped/``) and alone (``alone/``), a folder without the object, another
    spelling of a path (``gcs://``, a trailing slash), and a local path (not on GCS: not answered)."""
    data = record_bytes({"a.py": "1"})
    grouped = [f"{gs_prefix}/grouped/s{i}" for i in range(5)]
    for i, path in enumerate(grouped):
        gcs.filesystem().pipe_file(f"{path}/{CODE_RECORD}", data + b" " * i)
        gcs.filesystem().pipe_file(f"{path}/.executor_status", b"SUCCESS")
    alone = gs_prefix + "/alone/s"
    gcs.filesystem().pipe_file(f"{alone}/{CODE_RECORD}", data)
    gcs.filesystem().pipe_file(f"{alone}/{CODE_RECORD}.old", b"other")
    missing = gs_prefix + "/grouped/s9"
    gcs.filesystem().pipe_file(f"{missing}/.executor_status", b"SUCCESS")
    other_spelling = "gcs://" + grouped[0].removeprefix("gs://") + "/"
    local = str(tmp_path / "local")
    got = batch.read_md5s([*grouped, alone, missing, other_spelling, local], CODE_RECORD)
    want = {path: batch.md5_of(data + b" " * i) for i, path in enumerate(grouped)}
    want.update({alone: batch.md5_of(data), missing: None, other_spelling: want[grouped[0]]})
    assert got == want


def test_read_many_reads_gcs_and_local_paths_in_order(gs_prefix: str, tmp_path: Path) -> None:
    gcs.filesystem().pipe_file(gs_prefix + "/a/x", b"one")
    gcs.filesystem().pipe_file(gs_prefix + "/b/x", b"two")
    (tmp_path / "local").write_bytes(b"three")
    paths = [gs_prefix + "/b/x", str(tmp_path / "local"), gs_prefix + "/missing", gs_prefix + "/a/x"]
    paths.append(str(tmp_path / "missing"))
    assert batch.read_many(paths) == [b"two", b"three", None, b"one", None]
