"""``why``: for each step of a target (and each step it needs that would run), why it would run.

A step is up to date when its status is SUCCESS; else the reason is one of the reasons below, a changed version with its
differences from the most recent other version under the prefix. A folder holding only ``.executor_info`` is not built
yet, not deleted. A step shared by several targets is explained once. A step waiting for a checkpoint not there yet says
so (``waits_for``), and the producer is listed as needed (``run.handoff``)."""

from __future__ import annotations

import hashlib
import json
import textwrap
from dataclasses import asdict, dataclass, field
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.cache.text import format_age, short_json
from marinbuild.core.jsonenc import dumps_sorted
from marinbuild.core.labels import Label
from marinbuild.core.placeholders import ExecutorStep
from marinbuild.core.resources import hardware_of
from marinbuild.core.walk import instantiate_config
from marinbuild.engine.code_records import for_session, sentence
from marinbuild.load.builtins import Struct
from marinbuild.run.handoff import needs
from marinbuild.store import other_versions
from marinbuild.store.prefix_walk import Store
from marinbuild.store.records import INFO_FILE
from marinbuild.store.traceback_file import existing_traceback

# Why a step would (re)run, or ``built``: what ``why`` prints and its JSON says.
BUILT = "built"
NEVER_BUILT = "never built"
INCOMPLETE = "output deleted or incomplete"
FAILED_BEFORE = "failed before"
RUNNING_ELSEWHERE = "running elsewhere"
ABANDONED = "abandoned run"
VERSION_CHANGED = "version changed"
DAMAGED = "damaged"
ABSENT = "(absent)"


@dataclass
class StepExplanation:
    """Why one step would (re)run, or that it is up to date."""

    step: str
    output_path: str
    reason: str
    requested: bool = True  # False: a dependency listed because it would run
    status: str | None = None
    detail: str | None = None
    changes: list[str] = field(default_factory=list)
    previous_output_path: str | None = None
    lease_holder: str | None = None
    lease_age: float | None = None
    error: str | None = None
    resources: str | None = None  # the TPU slice or GPUs the step asks for
    work: list[str] = field(default_factory=list)  # what its own work would redo (a tokenize: its shards)
    waits_for: str | None = None  # the checkpoint of another step it starts from, not there yet

    @property
    def will_run(self) -> bool:
        return self.reason != BUILT

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"will_run": self.will_run}


@dataclass
class TargetExplanation:
    """The explanations of one target that a pattern matched."""

    target: str
    steps: list[StepExplanation]


def why(session: Any, label: str | Label) -> list[StepExplanation]:
    """Explain every step of ``label`` (or of a pattern's targets, each once) and every step they need that would run,
    dependencies first; statuses are read as the plan reads them, so the extra steps are its ``to_run``."""
    groups = why_targets(session, [label])
    chosen: dict[str, StepExplanation] = {}
    for group in groups:
        for e in group.steps:
            if e.output_path not in chosen or e.requested:  # a step a matched target owns is not a mere dependency
                chosen[e.output_path] = e
    return [chosen[p] for p in step_paths(session) if p in chosen]


def step_paths(session: Any) -> list[str]:
    """The output paths of the analysed steps in the engine's step order (dependencies first)."""
    return [session.engine.output_paths[s] for s in session.engine.steps]


def why_targets(session: Any, patterns: list[str | Label]) -> list[TargetExplanation]:
    """Explain each target ``patterns`` match, in order, as ``why`` would alone."""
    labels = pb.resolve_targets(session, patterns)
    engine = session.engine
    table = engine.table
    stale_after = pb.stale_after_of(session)
    probes: dict[ExecutorStep, pb.Probe] = {}
    explained: dict[tuple[ExecutorStep, bool], StepExplanation] = {}
    position = {step: i for i, step in enumerate(table.steps)}  # dependencies first
    reached_by_label: list[tuple[Label, list[ExecutorStep], set[ExecutorStep]]] = []
    for label in labels:
        requested = list(dict.fromkeys(session.steps_of(label)))
        reached: set[ExecutorStep] = set()
        frontier = requested
        while frontier:
            unread = [engine.output_paths[s] for s in frontier if s not in probes]
            found = pb.probe_outputs(unread, stale_after) if unread else {}
            following: dict[ExecutorStep, None] = {}
            for step in frontier:
                reached.add(step)
                if step not in probes:
                    probes[step] = found[engine.output_paths[step]]
                if probes[step].state != pb.BUILT:
                    following.update((dep, None) for dep in needs(table, step) if dep not in reached)
            frontier = [s for s in following if s not in reached]
        reached_by_label.append((label, requested, reached))
    # The code of every built step explained, checked at once (a listing per few hundred steps on GCS).
    built = [s for _, requested, _ in reached_by_label for s in requested if probes[s].state == pb.BUILT]
    for_session(session).check(built)
    groups = []
    for label, requested, reached in reached_by_label:
        wanted = set(requested)
        steps = []
        for step in sorted(reached, key=position.__getitem__):
            if step not in wanted and probes[step].state == pb.BUILT:
                continue
            key = (step, step in wanted)
            if key not in explained:
                explained[key] = _explain(session, step, probes[step], requested=step in wanted)
                if explained[key].will_run:
                    explained[key].work = _work(session, step)
                    waits = pb.waits_for(table, step, stale_after)
                    explained[key].waits_for = waits[1] if waits else None
            steps.append(explained[key])
        groups.append(TargetExplanation(str(label), steps))
    return groups


def explain_step(session: Any, step: ExecutorStep) -> str:
    """One line saying why ``step`` would run (for ``build --explain``); its version must be computed."""
    step = session.engine.canonicalize(step)
    probe = pb.probe_output(session.engine.output_paths[step], pb.stale_after_of(session))
    return one_line(_explain(session, step, probe, requested=True))


def one_line(e: StepExplanation) -> str:
    if e.reason == VERSION_CHANGED:
        shown = "; ".join(e.changes[:2])
        more = f" (+{len(e.changes) - 2} more)" if len(e.changes) > 2 else ""
        return f"{e.reason}: {shown}{more}" if shown else e.reason
    if e.reason == DAMAGED:
        return f"damaged: {e.error}"
    return f"{e.reason} ({e.detail})" if e.detail else e.reason


def format_why(explanations: list[StepExplanation]) -> str:
    if not explanations:
        return "nothing to explain: the target has no steps\n"
    lines: list[str] = []
    for e in explanations:
        role = "" if e.requested else " [needed dependency]"
        head = "up to date" if e.reason == BUILT else f"would run: {e.reason}"
        lines.append(f"{e.step}{role}: {head}")
        lines.append(f"  output: {e.output_path}")
        if e.resources:
            lines.append(f"  resources: {e.resources}")
        if e.reason == DAMAGED:
            lines.append(f"  error: {e.error}")
        elif e.detail:
            lines.append(f"  {e.detail}")
        if e.previous_output_path:
            lines.append(f"  previous version: {e.previous_output_path}")
        lines.extend(f"  {change}" for change in e.changes)
        lines.extend(f"  {line}" for line in e.work)
        if e.waits_for:
            lines.append(f"  waits for {e.waits_for}")
    return "\n".join(lines) + "\n"


def why_as_dict(label: str | Label, explanations: list[StepExplanation]) -> dict[str, Any]:
    """The JSON form of one target: ``{"target", "steps": [...], "to_run": [names]}``."""
    return {
        "target": str(label),
        "steps": [e.to_dict() for e in explanations],
        "to_run": [e.step for e in explanations if e.will_run],
    }


def format_why_targets(groups: list[TargetExplanation]) -> str:
    return "\n".join(f"{group.target}\n" + textwrap.indent(format_why(group.steps), "  ") for group in groups)


def why_targets_as_dict(patterns: list[str], groups: list[TargetExplanation], step_paths: list[str]) -> dict[str, Any]:
    """A pattern's JSON form (``patterns``, ``targets``, ``to_run``), steps to run once, in ``step_paths`` order."""
    running = {e.output_path: e.step for group in groups for e in group.steps if e.will_run}
    return {
        "patterns": list(patterns),
        "targets": [why_as_dict(group.target, group.steps) for group in groups],
        "to_run": [running[path] for path in dict.fromkeys(step_paths) if path in running],
    }


# -- one step ----------------------------------------------------------------------------------


def _explain(session: Any, step: ExecutorStep, probe: pb.Probe, *, requested: bool) -> StepExplanation:
    engine = session.engine
    e = StepExplanation(step.name, probe.output_path, BUILT, requested, probe.status)
    e.resources = hardware_of(step.resources)
    if probe.lease is not None:
        e.lease_holder, e.lease_age = probe.lease.worker_id, round(probe.lease_age or 0.0, 1)
    if probe.state == pb.BUILT:
        changed = for_session(session).of(step)
        if changed:
            e.detail = f"{sentence(changed)} (not part of its key: not rebuilt; --rebuild TARGET rebuilds it)"
        return e
    if probe.state == pb.DAMAGED:
        e.reason, e.error = DAMAGED, probe.error
    elif probe.state == pb.FAILED:
        e.reason, e.detail = FAILED_BEFORE, f"status {probe.status}"
        if (traceback := existing_traceback(probe.output_path)) is not None:
            e.detail += f"; traceback: {traceback}"
    elif probe.state == pb.RUNNING:
        e.reason = RUNNING_ELSEWHERE
        e.detail = f"lease held by {e.lease_holder}, last heartbeat {format_age(e.lease_age)} ago"
    elif probe.state == pb.ABANDONED:
        stale = f"the lease of {e.lease_holder} is stale (last heartbeat {format_age(e.lease_age)} ago)"
        e.reason, e.detail = ABANDONED, f"status RUNNING but {'no lease' if probe.lease is None else stale}"
    if e.reason != BUILT:
        return e
    held = Store(probe.output_path).names(probe.output_path)
    if held is not None and held != [INFO_FILE]:  # only the info: written before the step ran, as Marin does
        e.reason = INCOMPLETE
        e.detail = "the output folder exists but has no status" if probe.status is None else None
        return e
    other = other_versions.latest_other_version(session.settings.prefix, step.name, exclude=probe.output_path)
    if other is None:
        e.reason = NEVER_BUILT
        return e
    e.reason = VERSION_CHANGED
    e.previous_output_path = other.output_path
    # Compare like with like: the stored version is JSON, so encode the current one the same way
    # (dataclass, Path and enum values become what the info file holds).
    e.changes = version_changes(other.info["version"], json.loads(dumps_sorted(engine.versions[step])))
    if not e.changes:
        e.changes = ["(no difference in the recorded versions; the output path was chosen differently)"]
    return e


def _work(session: Any, step: ExecutorStep) -> list[str]:
    """A tokenize target's shards: how many are cached, which are new (``marinbuild.ml.tokenize.shard_status``)."""
    config = step.config
    if not str(getattr(config, "rule_key", "")).endswith("%tokenize"):
        return []
    from marinbuild.analysis.analyze import _resolve  # lazy: starlark, and fsspec below
    from marinbuild.ml.tokenize import payload_of, shard_status

    engine = session.engine
    output_path = engine.output_paths[step]
    try:
        resolved = instantiate_config(config, output_path, engine.output_paths, session.settings.prefix)
        attrs = Struct(**{k: _resolve(v) for k, v in resolved.attrs.items()})
        package, _, name = resolved.label.lstrip("/").partition(":")
        return shard_status(payload_of(attrs, output_path, name, package))
    except FileNotFoundError as exc:
        return [f"shards: not known until its documents are built ({exc})"]


# -- version differences -----------------------------------------------------------------------


def version_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Lines naming each difference between two step versions (``{"name", "config", "dependencies", ...}``)."""
    changes: list[str] = []
    old_config, new_config = old.get("config"), new.get("config")
    if isinstance(old_config, dict) and isinstance(new_config, dict):
        _config_changes("config", old_config, new_config, changes)
    elif old_config != new_config:
        changes.append(f"config: {short_json(old_config)} -> {short_json(new_config)}")
    for key, label in (("dependencies", "dependency"), ("pseudo_dependencies", "pseudo-dependency")):
        changes.extend(_dependency_changes(label, old.get(key) or [], new.get(key) or []))
    return changes


def _config_changes(path: str, old: dict[str, Any], new: dict[str, Any], out: list[str]) -> None:
    for key in sorted(old.keys() | new.keys(), key=str):
        where = f"{path}.{key}"
        if key not in new:
            out.append(f"{where}: {short_json(old[key])} -> {ABSENT}")
        elif key not in old:
            out.append(f"{where}: {ABSENT} -> {short_json(new[key])}")
        elif isinstance(old[key], dict) and isinstance(new[key], dict):
            _config_changes(where, old[key], new[key], out)
        elif old[key] != new[key] or type(old[key]) is not type(new[key]):
            out.append(f"{where}: {short_json(old[key])} -> {short_json(new[key])}")


def dependency_id(dep: Any) -> tuple[str, str]:
    """(name, ``name-hash``) of a dependency as a version records it (a dict, or already ``name-hash``)."""
    if isinstance(dep, dict):
        text = json.dumps(dep, sort_keys=True)
        name = str(dep.get("name", "?"))
        return name, f"{name}-{hashlib.md5(text.encode()).hexdigest()[:6]}"
    text = str(dep)
    name, sep, digest = text.rpartition("-")
    return (name, text) if sep and len(digest) == 6 else (text, text)


def _dependency_changes(kind: str, old: list[Any], new: list[Any]) -> list[str]:
    old_ids = [dependency_id(d) for d in old]
    new_ids = [dependency_id(d) for d in new]
    names = list(dict.fromkeys([n for n, _ in old_ids] + [n for n, _ in new_ids]))
    out: list[str] = []
    for name in names:
        before = [h for n, h in old_ids if n == name]
        after = [h for n, h in new_ids if n == name]
        for h in list(before):
            if h in after:
                before.remove(h)
                after.remove(h)
        out.extend(f"{kind} {name}: {b} -> {a}" for b, a in zip(before, after, strict=False))
        paired = min(len(before), len(after))
        out.extend(f"{kind} removed: {b}" for b in before[paired:])
        out.extend(f"{kind} added: {a}" for a in after[paired:])
    return out
