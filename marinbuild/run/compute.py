"""Compute accounting, owned here: each step's record ``<output>/.marinbuild_compute.<hours>.json`` and a build's
totals. The record's name carries its hours (``.marinbuild_compute.CPU=0.5,TPU-v4=12.json``) so that what a build
reused is read from listings: a no-op on ``gs://`` makes one more listing per 400 steps of a folder, not a request
per step (``store/batch.py``); the file holds everything else (wall time, resources held, attempts, preemptions).

The process that runs a step meters it: ``start`` as the step starts (``StepJob.run`` locally, ``RemoteRun.start``
in a Ray task), ``note`` from the step's code (``ml/slice_run``: each extra attempt, preemption and the seconds
the slices were held), ``finish`` at the commit, which writes the record before SUCCESS (``fs.write_atomic``: a
local folder or ``gs://``). The resources held are the step's request (no CPU request: 1, a Ray task's default);
TPU chip-hours are chips x the seconds the slices were held when the step notes them, else x wall time.

``account`` reads the hours of what a build reused and ran into ``{"reused", "spent"}`` totals (hours by unit,
``unknown``: steps with no record, made by Marin or before records; counted, never guessed) and ``steps`` (each
one's ``how`` and ``hours``); ``text`` words it: ``reused 3 steps worth 1,240 TPU v4 chip-hours; spent ...``."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from typing import Any

from marinbuild.core.resources import Resources, normalize
from marinbuild.store import batch, fs
from marinbuild.store.prefix_walk import Store

PREFIX, SUFFIX = ".marinbuild_compute.", ".json"
FORMAT = "marinbuild-compute/1"
_meters: dict[str, dict[str, Any]] = {}
_lock = threading.Lock()


def start(output_path: str, resources: Any, backend: str) -> None:
    """Meter the step writing ``output_path``, in this process, holding ``resources`` (any form ``normalize`` takes)."""
    res = normalize(resources) or Resources()  # checked before the build started
    tpu, n = res.tpu_slice, res.slices
    meter = {"format": FORMAT, "backend": backend, "started": time.time(), "attempts": 1, "preemptions": 0}
    meter |= {"cpus": 1 if res.cpu is None else res.cpu, "gpus": res.gpu or 0, "tpu": tpu and tpu.type}
    meter |= {"slices": n, "hosts": tpu.vms * n, "chips": tpu.chips * n} if tpu else {}
    with _lock:
        _meters[output_path] = meter


def note(output_path: str, **counts: float) -> None:
    """Add ``counts`` (``attempts``, ``preemptions``, ``tpu_seconds``) to the running step's; nothing if none is
    metered in this process."""
    with _lock:
        meter = _meters.get(output_path, {})
        for key, value in counts.items() if meter else ():
            meter[key] = meter.get(key, 0) + value


def finish(output_path: str, names: Iterable[str]) -> None:
    """At the commit, before SUCCESS: write the step's record (nothing if it was not metered here), replacing an
    earlier one among ``names`` (the folder's, listed at the commit: a rebuild's)."""
    with _lock:
        r = _meters.pop(output_path, None)
    if r is None:
        return
    r["ended"] = time.time()
    wall = r["wall_seconds"] = round(r["ended"] - r["started"], 6)
    hours = {"CPU-hours": r["cpus"] * wall / 3600, "GPU-hours": r["gpus"] * wall / 3600}
    if r["tpu"]:
        hours[f"TPU {r['tpu'].split('-')[0]} chip-hours"] = r["chips"] * r.get("tpu_seconds", wall) / 3600
    r["hours"] = {unit: round(h, 9) for unit, h in hours.items() if h}
    short = (unit[:3] if unit[0] != "T" else "TPU-" + unit.split()[1] for unit in r["hours"])
    name = PREFIX + ",".join(f"{u}={h}" for u, h in zip(short, r["hours"].values(), strict=True)) + SUFFIX
    earlier = [n for n in names if n.startswith(PREFIX) and n != name]
    fs.write_atomic(fs.join(output_path, name), json.dumps(r).encode())
    for n in earlier:
        fs.remove(fs.join(output_path, n))


def hours_named(name: str) -> dict[str, float] | None:
    """The hours a record's file name carries (``.marinbuild_compute.CPU=0.5,TPU-v4=12.json``); None if not one."""
    if not (name.startswith(PREFIX) and name.endswith(SUFFIX)):
        return None
    units = {"CPU": "CPU-hours", "GPU": "GPU-hours"}
    try:
        pairs = [pair.split("=") for pair in name[len(PREFIX) : -len(SUFFIX)].split(",") if pair]
        return {units.get(u) or f"TPU {u[4:]} chip-hours": float(h) for u, h in pairs}
    except ValueError:
        return None


def hours_at(paths: list[str]) -> list[dict[str, float] | None]:
    """The hours of each output's record, None where it has none: from the names in each output folder (on
    ``gs://``, batched listings, ``store/batch.py``: no request per output)."""
    listed = batch.read_md5s(paths, PREFIX, named=True)
    names = [[listed[p] or ""] if p in listed else Store(p).names(p) or () for p in paths]
    return [next((h for h in map(hours_named, n) if h is not None), None) for n in names]


def totals(hours: Iterable[dict[str, float] | None]) -> dict[str, Any]:
    """``{"steps", "unknown", "hours": {unit: sum}}`` of steps' ``hours`` (None: no record)."""
    out: dict[str, Any] = {"steps": 0, "unknown": 0, "hours": {}}
    for h in hours:
        out["steps"] += 1
        out["unknown"] += h is None
        for unit, value in (h or {}).items():
            out["hours"][unit] = round(out["hours"].get(unit, 0) + value, 9)
    return out


def account(reused: dict[str, str], spent: dict[str, str]) -> dict[str, Any]:
    """What a build reused and spent: ``reused``/``spent`` are step name -> output path."""
    hours = hours_at([*reused.values(), *spent.values()])
    steps: dict[str, dict[str, Any]] = {
        n: {"how": "reused" if n in reused else "ran", "hours": h}
        for n, h in zip([*reused, *spent], hours, strict=True)
    }
    return {
        "reused": totals(s["hours"] for s in steps.values() if s["how"] == "reused"),
        "spent": totals(s["hours"] for s in steps.values() if s["how"] == "ran"),
        "steps": steps,
    }


def number(hours: float) -> str:
    return format(hours, ",.0f" if hours >= 100 else ".1f" if hours >= 1 else ".2f") if hours >= 0.01 else "<0.01"


def amount(total: dict[str, Any]) -> str:
    """``1,240 TPU v4 chip-hours, 0.20 CPU-hours (+ 1 step unknown)``: TPU first, then GPU, then CPU; ``unknown``
    when no step has a record, ``-`` for no step."""
    hours = ", ".join(f"{number(h)} {unit}" for unit, h in sorted(total["hours"].items(), reverse=True))
    k = total["unknown"]
    if not hours:
        return "unknown (no record)" if k else "-" if not total["steps"] else "0 hours"
    return hours + (f" (+ {k} step{'s' if k != 1 else ''} unknown)" if k else "")


def text(data: dict[str, Any]) -> str:
    """``reused 3 steps worth 1,240 TPU v4 chip-hours; spent 1 step worth 0.20 CPU-hours`` (empty parts left out)."""
    counts = [(key, data[key]["steps"]) for key in ("reused", "spent")]
    return "; ".join(f"{k} {n} step{'s' if n != 1 else ''} worth {amount(data[k])}" for k, n in counts if n)
