"""The CLI's no-op on a ``gs://`` prefix is answered from the analysis snapshot (fake-gcs-server, real CLI processes).

The snapshot answered when the build succeeds, runs nothing and leaves the snapshot file as it was (a full path
that succeeds writes it anew); a status changed on the bucket sends the next build down the full path, which reruns
the step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gcs_pipelines as gp
from workspaces import age_workspace

from marinbuild.store import gcs

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def _build(ws: Path, prefix: str, calls: Path) -> subprocess.CompletedProcess[str]:
    """``marinbuild //pipe:b --prefix PREFIX`` in a new process (``RACY_NS = 0``: marinbuild's own sources are inputs
    too, and may have been edited seconds ago)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARINBUILD_SERVE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), str(REPO), env.get("PYTHONPATH", "")])
    env["MB_CALLS"] = str(calls)
    env["MARINBUILD_METADATA_CACHE"] = str(ws / ".marinbuild" / "metadata.sqlite")
    code = (
        "import sys; from marinbuild.analysis import snapshot; snapshot.RACY_NS = 0; from marinbuild.cli import main; "
        f"sys.exit(main(['//pipe:b', '--prefix', {prefix!r}]))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ws, env=env, capture_output=True, text=True, timeout=120)


def _snapshots(ws: Path) -> dict[str, tuple[int, int]]:
    """The workspace's snapshot files, each with its inode and mtime: a full path that succeeds writes its own anew."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (ws / ".marinbuild" / "snapshots").glob("*.bin")}


def test_a_gcs_noop_is_answered_from_the_snapshot_until_a_status_changes(gs_prefix: str, tmp_path: Path) -> None:
    ws = gp.workspace(tmp_path / "ws")
    age_workspace(ws)
    calls = tmp_path / "calls.log"
    calls.touch()
    assert _build(ws, gs_prefix, calls).returncode == 0  # runs a and b
    noop = _build(ws, gs_prefix, calls)  # a no-op through the full path: writes the snapshot
    assert noop.returncode == 0, noop.stderr
    written = _snapshots(ws)
    assert written
    calls.write_text("")

    hit = _build(ws, gs_prefix, calls)
    assert hit.returncode == 0, hit.stderr
    assert hit.stdout == noop.stdout and calls.read_text() == ""
    assert _snapshots(ws) == written  # answered from it: not written again

    (status,) = gcs.filesystem().glob(gs_prefix + "/pipe/b-*/.executor_status")
    gcs.filesystem().pipe_file(status, b"FAILED")
    rerun = _build(ws, gs_prefix, calls)  # the snapshot does not answer: the full path reruns b
    assert rerun.returncode == 0, rerun.stderr
    assert [Path(p).name.rsplit("-", 1)[0] for p in calls.read_text().split()] == ["b"]
    assert _snapshots(ws) != written
