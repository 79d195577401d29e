"""The tootsie rehearsal, end to end: ``python experiments/tootsie_rehearsal/rehearse.py [--workdir DIR]``
(``make rehearsal``).

Starts fake-gcs-server (a ``gs://`` bucket) and a local Ray cluster: a CPU head node and four nodes that look
to Ray like TPU hosts (two single-host v4-8 slices and the two hosts of a v4-16 slice: a node carries one slice
name, so the multislice and the multi-host phases need hosts of their own), with tests/fakegcs.py and
tests/ray/raycluster.py. Then, with ``marinbuild submit`` from a copy of the workspace:

1. builds ``//experiments/tootsie_rehearsal:all`` and kills the build (SIGKILL to the job's driver) once
   jellyfish, the multi-host phase, has written a checkpoint of its own;
2. builds it again: finished steps are not redone, jellyfish resumes from its checkpoint; once it has
   checkpointed again, host 1's training process is SIGKILLed (a preempted VM) and the slice resumes;
3. builds the same target from a second copy of the workspace at another path, on the same bucket: nothing
   runs.

It stops everything it started, keeps the event logs and each phase's ``runs.jsonl``, ``logs/slice.log`` and
``summary.json`` in ``--workdir`` (tests/ray/test_rehearsal.py reads them), and prints a summary (also
``summary.json`` there). Exit code 0 if every build did what is said above.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "ray")]

from fakegcs import running_server  # noqa: E402
from raycluster import NODE_ENV, node_env, start_cluster  # noqa: E402
from slice_runs import training_process  # noqa: E402

PACKAGE = "experiments/tootsie_rehearsal"
TARGET = f"//{PACKAGE}:all"
PHASES = ("kestrel", "jellyfish", "starling")
HANDOFFS = {"jellyfish": ("kestrel", 4), "starling": ("jellyfish", 12)}  # BUILD.marin's
COPIED = ("experiments/tootsie/tootsie.star", PACKAGE)
GCS_ENV = {"NO_GCE_CHECK": "true", "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "HF_HUB_OFFLINE": "1"}
EMULATOR_ENV = (*GCS_ENV, "STORAGE_EMULATOR_HOST", "TENSORSTORE_GCS_HTTP_URL", "GOOGLE_AUTH_TOKEN_FOR_TESTING")
"""Passed to the jobs: fake-gcs-server for gcsfs (STORAGE_EMULATOR_HOST) and for tensorstore, which writes
levanter's caches and checkpoints (its GCS URL, and a token so it looks for no credentials)."""
KEPT = ("runs.jsonl", "summary.json", "metrics.jsonl", ".marinbuild_traceback.txt")
WAIT = 600.0


def make_workspace(root: Path) -> Path:
    """A workspace holding the rehearsal's package and the macro it loads (tootsie.star)."""
    for rel in COPIED:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if (REPO / rel).is_dir() else shutil.copy)(REPO / rel, root / rel)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "tootsie-rehearsal"\n\n[tool.marinbuild]\nheartbeat_interval = 2\nstale_after = 15\n'
    )
    return root


class Rehearsal:
    def __init__(self, workdir: Path, dashboard: str, prefix: str):
        self.workdir, self.dashboard, self.prefix = workdir, dashboard, prefix
        from marinbuild.store import gcs

        self.fs = gcs.filesystem()

    def submit(self, ws: Path, name: str) -> subprocess.Popen:
        """``marinbuild submit`` of the target's build from ``ws``, followed (its output in ``<name>.log``)."""
        env = [a for k in EMULATOR_ENV for a in ("-e", k, os.environ[k])]
        events = self.workdir / f"events-{name}.jsonl"
        command = ["submit", "--address", self.dashboard, *env, "--", "python", "-m", "marinbuild", "--backend", "ray"]
        command += ["--prefix", self.prefix, TARGET, "--build_event_json_file", str(events)]
        log = open(self.workdir / f"{name}.log", "w")
        return subprocess.Popen(
            [sys.executable, "-m", "marinbuild", *command], cwd=ws, env=node_env(), stdout=log, stderr=log
        )

    def path(self, phase: str, rel: str = "") -> str:
        return f"{self.prefix}/checkpoints/rehearsal-{phase}/{rel}".rstrip("/")

    def checkpoints(self, phase: str) -> list[int]:
        self.fs.invalidate_cache()
        found = self.fs.glob(self.path(phase, "checkpoints/step-*/metadata.json"))
        return sorted(int(p.split("/step-")[1].split("/")[0]) for p in found)

    def runs(self, phase: str) -> list[dict[str, Any]]:
        self.fs.invalidate_cache()
        path = self.path(phase, "runs.jsonl")
        return [json.loads(x) for x in self.fs.cat(path).decode().splitlines()] if self.fs.exists(path) else []

    def until(self, what: str, proc: subprocess.Popen, test: Any) -> Any:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            value = test()
            if value:
                return value
            if proc.poll() is not None:
                raise RuntimeError(f"the build ended (exit {proc.returncode}) before {what}; see {proc.args}")
            time.sleep(0.5)
        raise RuntimeError(f"timed out waiting for {what}")

    def keep(self) -> None:
        """Each phase's records and logs, copied out of the bucket before the server (in memory) stops."""
        for phase in PHASES:
            if not self.fs.exists(self.path(phase)):
                continue
            found = [p.split(f"/rehearsal-{phase}/")[1] for p in self.fs.find(self.path(phase))]
            (self.workdir / phase).mkdir(parents=True, exist_ok=True)
            (self.workdir / phase / "listing.json").write_text(json.dumps(sorted(found)))
            for rel in found:
                if rel in KEPT or rel.startswith("logs/"):
                    (self.workdir / phase / rel).parent.mkdir(parents=True, exist_ok=True)
                    (self.workdir / phase / rel).write_bytes(self.fs.cat(self.path(phase, rel)))


def driver_pid(events: Path) -> int:
    """The process of the job's build (its command line names ``events``)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if str(events).encode() in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                if b"submit" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return int(pid)
        except OSError:
            continue
    raise RuntimeError(f"no build process writing {events}")


def events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def rehearse(workdir: Path) -> dict[str, Any]:
    started, marks = time.monotonic(), {}
    os.environ.update(GCS_ENV)  # Ray, as the cluster's nodes run it (read when ray is imported: before that)
    os.environ.update({k: NODE_ENV[k] for k in ("RAY_AUTH_MODE", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")})
    with running_server(preconditions=True) as url:  # 2 processes writing OCDBT checkpoints need GCS preconditions
        os.environ.update(STORAGE_EMULATOR_HOST=url, TENSORSTORE_GCS_HTTP_URL=url, GOOGLE_AUTH_TOKEN_FOR_TESTING="x")
        bucket = f"rehearsal-{uuid.uuid4().hex[:8]}"
        from marinbuild.store import gcs

        gcs.filesystem().mkdir(bucket)
        cluster, builds, r = start_cluster(num_cpus=2), [], None
        try:
            for n in ("a", "b"):
                cluster.add_tpu_slice("v4-8", f"rehearsal-v4-8-{n}", hosts=1)
            cluster.add_tpu_slice("v4-16", "rehearsal-v4-16", hosts=2)
            marks["cluster"] = time.monotonic()
            r = Rehearsal(workdir, cluster.dashboard_url, f"gs://{bucket}/rehearsal")
            ws = make_workspace(workdir / "ws-a")

            first = r.submit(ws, "1")
            builds.append(first)  # killed once jellyfish has a checkpoint of its own
            r.until("jellyfish's first checkpoint", first, lambda: [s for s in r.checkpoints("jellyfish") if s > 4])
            os.kill(driver_pid(workdir / "events-1.jsonl"), signal.SIGKILL)
            first.wait(120)
            marks["1"] = time.monotonic()

            second = r.submit(ws, "2")
            builds.append(second)  # resumes; host 1 of the v4-16 killed once it checkpointed again
            before = len(r.runs("jellyfish"))  # a lost host on a loaded machine may have added runs already
            resumed = r.until(
                "jellyfish resumed", second, lambda: len(r.runs("jellyfish")) > before and r.runs("jellyfish")
            )
            start = resumed[-1]["start_step"]
            r.until("jellyfish's checkpoint after resuming", second, lambda: max(r.checkpoints("jellyfish")) >= start)
            os.kill(training_process("MARINBUILD_TPU_WORKER_ID=1"), signal.SIGKILL)
            if second.wait(WAIT) != 0:
                raise RuntimeError(f"the second build failed: {workdir / '2.log'}")
            marks["2"] = time.monotonic()

            other = r.submit(make_workspace(workdir / "ws-b" / "elsewhere"), "b")
            if other.wait(WAIT) != 0:
                raise RuntimeError(f"the second workspace's build failed: {workdir / 'b.log'}")
            marks["b"] = time.monotonic()
        finally:
            try:
                if r is not None:
                    r.keep()
            finally:  # whatever keeping the records did, stop what was started
                import ray

                for proc in builds:
                    if proc.poll() is None:
                        proc.kill()
                ray.shutdown()
                cluster.stop()
    # seconds of each part: the cluster's start, each build (from the end of the part before)
    ends = list(marks.values())
    parts = {name: round(end - begin) for name, begin, end in zip(marks, [started, *ends], ends, strict=False)}
    return summary(workdir, r.prefix, time.monotonic() - started, parts)


def summary(workdir: Path, prefix: str, seconds: float, parts: dict[str, int]) -> dict[str, Any]:
    """What the rehearsal showed, read from the builds' event logs and the phases' records."""
    builds = {name: events(workdir / f"events-{name}.jsonl") for name in ("1", "2", "b")}
    ran = {name: sorted({e["step"] for e in evs if e["kind"] == "started"}) for name, evs in builds.items()}
    done_first = {e["step"] for e in builds["1"] if e["kind"] in ("succeeded", "cached")}
    phases = {}
    for phase in PHASES:
        runs = [json.loads(x) for x in (workdir / phase / "runs.jsonl").read_text().splitlines()]
        slice_log = workdir / phase / "logs" / "slice.log"
        attempts = slice_log.read_text().splitlines() if slice_log.exists() else []
        phases[phase] = {
            "output": f"{prefix}/checkpoints/rehearsal-{phase}",
            "start_steps": [run["start_step"] for run in runs],
            "from_checkpoint": runs[0].get("checkpoint"),
            "preempted": sum("preempted" in line for line in attempts),
            "last_step": json.loads((workdir / phase / "summary.json").read_text())["last_step"],
        }
    reused = {e["step"] for e in builds["b"] if e["kind"] == "planned" and e["detail"] == "built"}
    return {
        "seconds": round(seconds),
        "parts": parts,
        "phase_seconds": phase_seconds(builds),
        "phases": phases,
        "handoffs": {p: f"{src} step-{step}" for p, (src, step) in HANDOFFS.items()},
        "host_preemptions": sum(p["preempted"] for p in phases.values()),
        "build_kills": 1,
        "redone_after_kill": sorted(set(ran["2"]) & done_first),
        "ran": ran,
        "reused_by_second_workspace": sorted(reused),
    }


def phase_seconds(builds: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Per step that ran, the seconds from its first start to its success, over the builds."""
    began: dict[str, float] = {}
    took = {}
    for e in (e for evs in builds.values() for e in evs):
        name = e["step"].removeprefix(PACKAGE + "/") if e["step"] else None
        if e["kind"] == "started":
            began.setdefault(name, e["time"])
        elif e["kind"] == "succeeded" and name in began:
            took[name] = round(e["time"] - began[name])
    return took


def show(s: dict[str, Any]) -> str:
    parts = ", ".join(f"{k}: {v} s" for k, v in s["parts"].items())
    lines = [f"tootsie rehearsal: {TARGET}, {s['seconds']} s (the cluster's start, builds 1, 2 and b: {parts})"]
    for name, p in s["phases"].items():
        source = f"from {p['from_checkpoint']}" if p["from_checkpoint"] else "from scratch"
        lines.append(f"  phase {name}: {p['output']}, {source}, runs started at steps {p['start_steps']}")
    lines.append(
        f"checkpoints handed off: {len(s['handoffs'])} ({', '.join(f'{v} -> {k}' for k, v in s['handoffs'].items())})"
    )
    lines.append(
        f"preemptions survived: {s['host_preemptions'] + s['build_kills']} (a host's training process killed "
        f"{s['host_preemptions']}x, the build killed {s['build_kills']}x; steps redone after the kill: "
        f"{s['redone_after_kill'] or 'none'})"
    )
    lines.append(
        f"steps reused by the second workspace: {len(s['reused_by_second_workspace'])} (steps it ran: "
        f"{len(s['ran']['b'])})"
    )
    return "\n".join(lines)


def diagnose(workdir: Path, lines: int = 40) -> str:
    """What a failed rehearsal leaves to read: each phase's logs (the slice's attempts, each host's process), then
    each build's last distinct lines (every node of this one-machine cluster forwards each line again), which name
    what failed: last, where a truncated message keeps them."""
    out = []
    for phase_log in sorted(workdir.glob("*/logs/*.log")):
        out += [f"--- {phase_log.relative_to(workdir)}:", *phase_log.read_text(errors="replace").splitlines()[-15:]]
    for log in sorted(workdir.glob("*.log")):
        seen = dict.fromkeys(x for x in log.read_text(errors="replace").splitlines() if "base HF config" not in x)
        out += [f"--- {log.name}, its last distinct lines:", *list(seen)[-lines:]]
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="where to keep the event logs and records (default: a temp dir)")
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="tootsie-rehearsal-"))
    workdir.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop what it started
    try:
        s = rehearse(workdir.resolve())
    except Exception:
        print(diagnose(workdir), file=sys.stderr)
        raise
    (workdir / "summary.json").write_text(json.dumps(s, indent=1))
    print(show(s))
    ok = not s["redone_after_kill"] and not s["ran"]["b"] and s["host_preemptions"] >= 1
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
