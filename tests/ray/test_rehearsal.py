"""The tootsie rehearsal end to end (``make rehearsal``: experiments/tootsie_rehearsal/rehearse.py), checked from
the builds' event logs and the phases' records it keeps, not only from its printed summary.

It starts a Ray cluster and fake-gcs-server of its own (this session's ``ray_cluster`` is not used), and trains a
handful of steps per phase; most of its time goes to the JAX processes' start (imports, tracing, compiling)
on each host of each phase, and to the kills' restarts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ml.qs_workspace import HAVE_LEVANTER

pytestmark = [
    pytest.mark.timeout(1800),
    pytest.mark.skipif(not HAVE_LEVANTER, reason="levanter is not installed (the ml extra)"),
]

REPO = Path(__file__).resolve().parents[2]
P = "experiments/tootsie_rehearsal/"


def _events(path: Path) -> dict[str, set[str]]:
    """Per event kind (``planned/<state>`` for the plan), the steps it happened to (the package's prefix dropped)."""
    out: dict[str, set[str]] = {}
    for e in map(json.loads, path.read_text().splitlines()):
        if e.get("step"):
            kind = f"planned/{e['detail']}" if e["kind"] == "planned" else e["kind"]
            out.setdefault(kind, set()).add(e["step"].removeprefix(P))
    return out


def _runs(workdir: Path, phase: str) -> list[dict]:
    return [json.loads(line) for line in (workdir / phase / "runs.jsonl").read_text().splitlines()]


def test_the_rehearsal_survives_its_kills_and_a_second_workspace_reuses_everything(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, str(REPO / P / "rehearse.py"), "--workdir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=1700)
    except subprocess.TimeoutExpired:
        proc.terminate()  # SIGTERM: it stops its cluster and servers (SIGKILL would leave them to the next tests)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-20000:]
    check(tmp_path, stdout)


def check(tmp_path: Path, stdout: str) -> None:
    """The rehearsal's facts, from what it kept in ``tmp_path`` (its --workdir) and printed."""
    first, second, other = (_events(tmp_path / f"events-{n}.jsonl") for n in ("1", "2", "b"))
    steps = first["planned/missing"]
    assert {"kestrel", "jellyfish", "starling", "base_eval/story_object"} <= steps and len(steps) == 9

    # build 1 was killed while jellyfish trained; build 2 redid nothing build 1 had finished
    assert "jellyfish" in first["started"] and "jellyfish" not in first.get("succeeded", set())
    assert first["succeeded"] and not (first["succeeded"] & second["started"])
    assert second["succeeded"] | first["succeeded"] == steps

    # the hand-offs: jellyfish from kestrel's step 4, starling from jellyfish's step 12
    kestrel, jellyfish, starling = (_runs(tmp_path, p) for p in ("kestrel", "jellyfish", "starling"))
    assert [r["start_step"] for r in kestrel] == [0]
    assert jellyfish[0]["start_step"] == 5
    assert jellyfish[0]["checkpoint"].endswith("rehearsal-kestrel/checkpoints/step-4")
    assert starling[0]["start_step"] == 13
    assert starling[0]["checkpoint"].endswith("rehearsal-jellyfish/checkpoints/step-12")

    # jellyfish resumed from its own checkpoints: after the build's kill, and after host 1's process was killed (on
    # a loaded machine a host may also be lost on its own: more runs, each from the latest checkpoint)
    resumed = [r for r in jellyfish if "rehearsal-jellyfish/" in r["checkpoint"]]
    assert len(resumed) >= 2 and all(r["checkpoint"].endswith(f"/step-{r['start_step'] - 1}") for r in resumed)
    assert [r["start_step"] for r in resumed] == sorted({r["start_step"] for r in resumed}), jellyfish
    slice_log = (tmp_path / "jellyfish" / "logs" / "slice.log").read_text()
    assert "reserving one v4-16 slice (2 hosts x 4 chips" in slice_log and "preempted" in slice_log, slice_log
    assert "reserving 2 v4-8 slices" in (tmp_path / "kestrel" / "logs" / "slice.log").read_text()
    for phase, last in (("kestrel", 5), ("jellyfish", 15), ("starling", 17)):
        assert json.loads((tmp_path / phase / "summary.json").read_text())["last_step"] == last
        listing = json.loads((tmp_path / phase / "listing.json").read_text())
        exports = {p.split("/")[1] for p in listing if p.startswith("hf/")}
        assert f"step-{last}" in exports and len(exports) >= 3, (phase, exports)  # HF exports while training
    metrics = [json.loads(line) for line in (tmp_path / "starling" / "metrics.jsonl").read_text().splitlines()]
    assert any(k.startswith("lm_eval/") for m in metrics for k in m), "no task evaluation while training"

    # the second workspace, elsewhere, on the same bucket: everything reused, nothing ran
    assert other.get("started", set()) == set() and other["planned/built"] == steps
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reused_by_second_workspace"] == sorted(P + s for s in steps)
    assert summary["host_preemptions"] >= 1 and summary["build_kills"] == 1 and not summary["redone_after_kill"]
    assert "checkpoints handed off: 2 (kestrel step-4 -> jellyfish, jellyfish step-12 -> starling)" in stdout
    assert "steps reused by the second workspace: 9 (steps it ran: 0)" in stdout
