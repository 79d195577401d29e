"""``cache gc`` policies on a gs:// prefix (fake-gcs-server) holding many versions of a step: nothing pinned or
under a live lease is deleted, ``--keep_last`` keeps the newest by their statuses' times on the bucket, and a gc
killed between a status and the rest of its folder leaves no step marked built without its outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from test_cache_gc import STEPS, package  # tests/ (its conftest puts it on sys.path)
from workspaces import write_workspace

from marinbuild.store import fs, gcs
from marinbuild.store import status as st
from marinbuild.store.lease import LeaseRecord, encode_lease, lease_path

PINNED = 'python_step(name = "p", fn = "gc_steps:write", config = {"v": 1}, pin = True)\n'


def run(ws: Path, *args: str, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ws), *sys.path])}
    if kill_at:
        env["MARINBUILD_KILL_AT_POINT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "marinbuild", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=300
    )


def folders(prefix: str) -> dict[str, list[str]]:
    """Each output folder of package a on the bucket -> its files."""
    filesystem = gcs.filesystem()
    filesystem.invalidate_cache()
    found: dict[str, list[str]] = {}
    for path in filesystem.find(prefix.removeprefix("gs://") + "/a"):
        folder, _, name = path.partition("/a/")[2].partition("/")
        found.setdefault(f"{prefix}/a/{folder}", []).append(name)
    return found


def test_gc_policies_on_a_bucket_keep_pins_leases_and_the_newest(gs_prefix: str, tmp_path: Path) -> None:
    ws = write_workspace(tmp_path / "ws", {"gc_steps.py": STEPS, "a/BUILD.marin": ""}, prefix=gs_prefix)
    made: list[str] = []
    for v in range(1, 7):
        (ws / "a/BUILD.marin").write_text(package({"x": v}) + PINNED.replace('"v": 1', f'"v": {min(v, 2)}'))
        assert run(ws, "//a:all").returncode == 0
        made += [f for f in folders(gs_prefix) if "/x-" in f and f not in made]
    old_p = [f for f in folders(gs_prefix) if "/p-" in f]
    leased = made[1]
    fs.write_atomic(lease_path(leased), encode_lease(LeaseRecord("busy-host", time.time())))

    done = run(ws, "cache", "gc", "//a:all", "--keep_last", "2", "--yes", "--output", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert sorted(result["deleted"]) == sorted([made[0], made[2], made[3]])
    skipped = {s["output_path"]: s["reason"] for s in result["skipped"]}
    assert skipped[leased].startswith("live lease held by busy-host")
    assert skipped[made[4]] == "one of the 2 newest versions of a/x (--keep_last)"
    assert [skipped[p] for p in old_p if p in skipped] == ["pinned: //a:p has pin = True"]
    left = folders(gs_prefix)
    assert sorted(f for f in left if "/x-" in f) == sorted([made[1], made[4], made[5]]) and len(old_p) == 2
    assert all(p in left for p in old_p)

    fs.remove(lease_path(leased))
    before = folders(gs_prefix)
    killed = run(ws, "cache", "gc", "//a:all", "--yes", kill_at="1:gc-status-removed")
    assert killed.returncode == -9, killed.stderr
    after = folders(gs_prefix)
    for folder, names in after.items():  # every step still marked built has all its files
        assert st.STATUS_FILE not in names or sorted(names) == sorted(before[folder]), folder
    assert any(st.STATUS_FILE not in after.get(f, []) for f in (leased, made[4]))  # caught mid-way
    again = run(ws, "cache", "gc", "//a:all", "--yes", "--output", "json")
    assert again.returncode == 0, again.stderr
    assert set(json.loads(again.stdout)["deleted"]) <= {leased, made[4]}
    assert leased not in folders(gs_prefix) and made[4] not in folders(gs_prefix)
