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


def _build(ws: Path, prefix: str, calls: Path, page_size: int = 1000) -> subprocess.CompletedProcess[str]:
    """``marinbuild //pipe:b --prefix PREFIX`` in a new process (``RACY_NS = 0``: marinbuild's own sources are inputs
    too, and may have been edited seconds ago; ``page_size``: objects per listing page)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "MARINBUILD_SERVE_URL")}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(HERE.parent), str(REPO), env.get("PYTHONPATH", "")])
    env["MB_CALLS"] = str(calls)
    env["MARINBUILD_METADATA_CACHE"] = str(ws / ".marinbuild" / "metadata.sqlite")
    code = (
        "import sys; from marinbuild.analysis import snapshot; snapshot.RACY_NS = 0; from marinbuild.cli import main; "
        f"from marinbuild.store import batch; batch.PAGE_SIZE = {page_size}; "
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


def test_a_listing_that_fails_partway_is_no_noop(gs_prefix: str, tmp_path: Path, proxy) -> None:
    """The CLI reading statuses a page at a time (one object per page): when every continuation page is refused,
    neither the snapshot nor the full path answers with the statuses of the first pages; the build fails, naming
    the listing."""
    ws = gp.workspace(tmp_path / "ws")
    age_workspace(ws)
    calls = tmp_path / "calls.log"
    calls.touch()
    assert _build(ws, gs_prefix, calls).returncode == 0
    assert _build(ws, gs_prefix, calls).returncode == 0  # the no-op that writes the snapshot
    proxy.activate()
    assert _build(ws, gs_prefix, calls, page_size=1).returncode == 0  # through the proxy, one object a page
    proxy.configure(forbid="pageToken=")
    failed = _build(ws, gs_prefix, calls, page_size=1)
    assert failed.returncode != 0, failed.stdout
    assert "already built" not in failed.stdout + failed.stderr
    assert f"listing {gs_prefix}/pipe/" in failed.stderr, failed.stderr


def test_a_snapshot_step_whose_path_holds_another_action_is_no_noop(gs_prefix: str) -> None:
    """``statuses_if_built`` answers only when every recorded step's folder holds its own action record (or none):
    a folder whose listed record is another action's is a collision, for the full path to report; one built with
    ``override_output_path`` holding another action is used as built."""
    from marinbuild.analysis import snapshot
    from marinbuild.store import batch
    from marinbuild.store.metadata_cache import MetadataCache

    ex = gp.executor(gs_prefix)
    steps = [gp.step(f"snap/s{i}", str(i)) for i in range(6)]
    gp.seed_built(ex, steps)
    paths = [ex.output_paths[s] for s in steps]
    listed = batch.read_statuses(paths, cache=MetadataCache(None)).actions
    own = [(s.name, p, next(iter(listed[p])), False) for s, p in zip(steps, paths, strict=True)]
    assert snapshot.statuses_if_built(snapshot.Snapshot([], own)) is not None
    other = "0" * 64
    assert snapshot.statuses_if_built(snapshot.Snapshot([], [*own[:3], (*own[3][:2], other, False), *own[4:]])) is None
    overridden = [*own[:3], (*own[3][:2], other, True), *own[4:]]
    assert snapshot.statuses_if_built(snapshot.Snapshot([], overridden)) is not None
