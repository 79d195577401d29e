"""Lineage of the outputs under a prefix, both ways, from what the prefix itself records.

Each output folder's ``.executor_info`` (Marin's format, which Marin's own runs write too) names the output
paths the step read (``dependencies``) and, for a BUILD target, its label (``config.label``) and rule; the run
infos in ``<prefix>/experiments`` each list the steps of one run. So lineage needs no BUILD file: it covers
outputs of targets since changed or removed, and outputs Marin made. An output's *producers* are the target
and the runs listing it; its *consumers* the outputs whose step read it, with their targets and runs.

Reading is one listing of the prefix's step folders and a read of each info and run info (in parallel): what
one question about a bucket costs, never paid by a build."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.cache.probe import RUN_INFO_FOLDER
from marinbuild.store import fs
from marinbuild.store.batch import read_many
from marinbuild.store.prefix_walk import Store, normalize
from marinbuild.store.records import info_path


@dataclass
class Recorded:
    """One output as its ``.executor_info`` records it (``label`` and ``rule`` None for a Marin step)."""

    output_path: str
    name: str
    label: str | None
    rule: str | None
    inputs: list[str]
    runs: list[str] = field(default_factory=list)
    """The run infos listing this output (``experiments/<name>.json``), oldest first."""


def _json(data: bytes | None) -> Any:
    try:
        return json.loads(data) if data else None
    except ValueError:
        return None


def recorded_outputs(prefix: str) -> dict[str, Recorded]:
    """Every output under ``prefix`` with a readable ``.executor_info``, by normalized output path."""
    folders = list(Store(prefix).step_folders())
    found: dict[str, Recorded] = {}
    for folder, data in zip(folders, read_many([info_path(f) for f in folders]), strict=True):
        info = _json(data)
        if not isinstance(info, dict):
            continue
        config = info["config"] if isinstance(info.get("config"), dict) else {}
        label, rule = config.get("label"), config.get("rule")
        inputs = [normalize(d) for d in info.get("dependencies") or [] if isinstance(d, str)]
        name = str(info["name"]) if isinstance(info.get("name"), str) else pb.step_name_of(folder, prefix)
        found[normalize(folder)] = Recorded(
            folder, name, label if isinstance(label, str) else None, rule if isinstance(rule, str) else None, inputs
        )
    runs_folder = fs.join(prefix, RUN_INFO_FOLDER)
    names = sorted(n for n in Store(prefix).names(runs_folder) or [] if n.endswith(".json"))
    runs = [_json(d) for d in read_many([fs.join(runs_folder, n) for n in names])]
    for name, run in sorted(zip(names, runs, strict=True), key=lambda r: _created(r[1])):
        for step in run.get("steps") or [] if isinstance(run, dict) else []:
            output = found.get(normalize(str(step.get("output_path")))) if isinstance(step, dict) else None
            if output is not None and f"{RUN_INFO_FOLDER}/{name}" not in output.runs:
                output.runs.append(f"{RUN_INFO_FOLDER}/{name}")
    return found


def _created(run: Any) -> str:
    return str(run.get("created_date") or "") if isinstance(run, dict) else ""


def lineage(prefix: str, output_path: str, outputs: dict[str, Recorded] | None = None) -> dict[str, Any]:
    """What made ``output_path`` and what used it: ``{"made_by": {label, rule, runs}, "inputs": [...],
    "used_by": [{output_path, name, label, rule, runs}]}`` (``made_by`` None without an info)."""
    outputs = recorded_outputs(prefix) if outputs is None else outputs
    key = normalize(output_path)
    own = outputs.get(key)

    def brief(o: Recorded) -> dict[str, Any]:
        return {"output_path": o.output_path, "name": o.name, "label": o.label, "rule": o.rule, "runs": o.runs}

    return {
        "made_by": None if own is None else {"label": own.label, "rule": own.rule, "runs": own.runs},
        "inputs": []
        if own is None
        else [brief(outputs[i]) if i in outputs else {"output_path": i} for i in own.inputs],
        "used_by": [brief(o) for o in sorted(outputs.values(), key=lambda o: o.output_path) if key in o.inputs],
    }


def format_lineage(lines: list[str], found: dict[str, Any]) -> None:
    """``cache show``'s lineage lines for one output, appended to ``lines``."""

    def who(o: dict[str, Any]) -> str:
        label = f" ({o['label']})" if o.get("label") else ""
        runs = f", in {len(o['runs'])} run(s), last {o['runs'][-1]}" if o.get("runs") else ""
        return f"{o['output_path']}{label}{runs}"

    made = found["made_by"]
    if made is None:
        lines.append("  made by:   unknown (no .executor_info)")
    else:
        target = made["label"] or "a script's step (no target)"
        runs = f"; listed by {len(made['runs'])} run(s): {', '.join(made['runs'])}" if made["runs"] else ""
        lines.append(f"  made by:   {target}{runs}")
    for title, key in (("reads", "inputs"), ("used by", "used_by")):
        for i, other in enumerate(found[key]):
            lines.append(f"  {title if i == 0 else '':<9}  {who(other)}")
        if not found[key]:
            lines.append(f"  {title:<9}  nothing recorded")
