"""The runs pages: builds from the workspace's event logs (newest first; ``run``: one as a timeline per step;
``durations``: each output's last run time, for the graph), and the run info JSONs under ``<prefix>/experiments/``
(``experiment``: one, with each step's state read now, as the plan reads them)."""

from __future__ import annotations

import os
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.cache.probe import RUN_INFO_FOLDER
from marinbuild.serve.facts import read_json, relative, shown_state
from marinbuild.serve.files import Refused, resolve
from marinbuild.store import fs
from marinbuild.store.prefix_walk import Store
from marinbuild.ui import event_log


def builds(cache_dir: str | os.PathLike[str], prefix: str) -> list[dict[str, Any]]:
    """Each recorded build against ``prefix``, newest first: when, what was asked, what ran and failed."""
    return [log.summary() for log in event_log.logs_for(cache_dir, prefix)]


def durations(cache_dir: str | os.PathLike[str], prefix: str) -> dict[str, float]:
    """Each output path's last run time (started to succeeded or failed), from the newest log that ran it."""
    found: dict[str, float] = {}
    for log in event_log.logs_for(cache_dir, prefix):
        started: dict[str, float] = {}
        for e in log.events:
            out = e.get("output_path")
            if e.get("kind") == "started" and out and isinstance(e.get("time"), (int, float)):
                started[out] = e["time"]
            elif e.get("kind") in ("succeeded", "failed") and out in started and out not in found:
                found[out] = round(e["time"] - started[out], 3)
    return found


def run(cache_dir: str | os.PathLike[str], prefix: str, run_id: str) -> dict[str, Any] | None:
    """One build's events as a timeline: per step its start, end and outcome; None if there is no such build."""
    if not run_id.replace("-", "").replace("T", "").isalnum():
        return None
    log = event_log.read_log(event_log.events_dir(cache_dir) / f"{run_id}.jsonl")
    if log is None:
        return None
    rows: dict[str, dict[str, Any]] = {}
    for e in log.events:
        out = e.get("output_path")
        if not out:
            continue
        if out not in rows:
            named = {"step": e.get("step"), "output_path": out, "relative": relative(prefix, out)}
            rows[out] = {**named, "start": None, "end": None, "outcome": None, "error": None}
        row = rows[out]
        kind = e.get("kind")
        if kind in ("started", "waiting") and row["start"] is None:
            row["start"] = e.get("time")
        elif kind in ("succeeded", "failed", "dep_failed", "skipped"):
            row["end"], row["outcome"] = e.get("time"), kind
            row["error"] = e.get("error") or (e.get("detail") if kind != "succeeded" else None)
    return {**log.summary(), "steps": list(rows.values())}


def run_infos(prefix: str) -> list[dict[str, Any]]:
    """The run info JSONs under ``<prefix>/experiments/`` (newest first): name, creation time, script, steps."""
    folder = fs.join(prefix, RUN_INFO_FOLDER)
    out = []
    for name in Store(prefix).names(folder) or []:
        if not name.endswith(".json"):
            continue
        path = fs.join(folder, name)
        data = read_json(path)
        if isinstance(data, dict):
            facts = {"created": data.get("created_date"), "script": data.get("caller_path")}
            out.append({"path": path, "name": name, **facts, "steps": len(data.get("steps") or [])})
    out.sort(key=lambda r: str(r["created"] or ""), reverse=True)
    return out


def experiment(prefix: str, path: str) -> dict[str, Any]:
    """A run info JSON (Marin's ``/experiment?path=``): its facts and each step with its state now."""
    folder = fs.join(prefix, "experiments") + "/"
    if not path.startswith(folder) or not path.endswith(".json"):
        raise Refused(400, f"{path!r} is not a run info JSON under {folder}")
    path = resolve(prefix, path[len(prefix) :].lstrip("/"))  # no '..', no symlink out of the prefix
    data = read_json(path)
    if not isinstance(data, dict):
        raise Refused(404, f"no readable run info at {path}")
    steps = [s for s in data.get("steps") or [] if isinstance(s, dict)]
    probes = pb.probe_outputs([s["output_path"] for s in steps if isinstance(s.get("output_path"), str)])
    shown = []
    for s in steps:
        out = s.get("output_path")
        probe = probes.get(out) if isinstance(out, str) else None
        state = shown_state(probe.state, probe.status) if probe else "missing"
        shown.append(
            {"name": s.get("name"), "output_path": out, "relative": relative(prefix, out or ""), "state": state}
        )
    facts = {k: data.get(k) for k in ("created_date", "caller_path", "user", "worker_id", "git_commit", "prefix")}
    return {"path": path, **facts, "steps": shown}
