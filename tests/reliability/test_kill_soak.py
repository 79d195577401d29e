"""Killing a small build at every metadata write it makes, and a short random kill soak of 2 concurrent runners."""

from __future__ import annotations

import harness as h
import pytest
import soak

from marinbuild.store import status as st

pytestmark = pytest.mark.soak  # many builds, each killed at a point: `make test` runs them, `make test-fast` does not


def test_a_kill_at_any_metadata_write_leaves_a_build_the_next_run_completes(tmp_path):
    """At each fault point in turn (every metadata write, lease creation and rewrite, the commit): kill the build,
    rerun it. The rerun must not wait (the dead runner's leases are taken at once), must rerun only the failing
    step's failure, and must leave every step's status and output what a clean build leaves."""
    points = h.fault_points(str(tmp_path / "golden"), "--fail")
    golden = h.outputs(str(tmp_path / "golden"))
    assert len(points) >= 30, points
    for n, name in enumerate(points, 1):
        prefix = str(tmp_path / f"kill-{n}")
        h.kill_at(prefix, points, n, "--fail")
        again = h.run(prefix, "--fail")
        where = f"killed at point {n} ({name})"
        assert again.code == 1 and again.result["error"].startswith("StepFailedError: 1 step(s) failed: f"), where
        assert again.result["waits"] == [], where
        assert h.outputs(prefix) == golden, where
        assert st.read_status(h.step_folder(prefix, "f")) == st.STATUS_FAILED, where


def test_a_short_kill_soak_of_two_runners_finds_no_violation(tmp_path):
    report = soak.soak(str(tmp_path / "p"), rounds=30, runners=2, seed=19)
    print("kill soak:", report.to_dict())
    assert report.violations == []
    assert report.final_ok
    assert report.kills > 0
