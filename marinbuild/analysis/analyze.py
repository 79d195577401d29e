"""Analysis: loaded BUILD targets become ``ExecutorStep``s, in the same graph as Marin's steps.

An ordinary target becomes one step named ``output_name`` (default ``"{package}/{name}"``) whose config
(``TargetConfig``) holds its attributes: versioned ones as ``versioned(value)``, a label as ``output_path_of(step)`` (a
dependency), ``checkpoint(":other", step = N)`` as Marin's ``other.cd("checkpoints/step-N").nonblocking()``
(``run.handoff``), a source file as a ``SourceFile`` whose digest is versioned. Its function, ``run_target``, calls the
rule's implementation with a ``RuleContext``. A rule with an ``analyze`` hook (Python scripts) returns existing
``ExecutorStep``s, versioned exactly as the script alone would."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marinbuild.core.labels import Label, parse_label
from marinbuild.core.placeholders import ExecutorStep, output_path_of, this_output_path, versioned
from marinbuild.core.walk import upstream_steps
from marinbuild.engine.code_records import display_path, file_digest
from marinbuild.load.attrs import CheckpointAttr, LabelAttr, LabelKeyedDictAttr, LabelListAttr
from marinbuild.load.builtins import Struct
from marinbuild.load.errors import BuildFileError
from marinbuild.load.frozen import thaw
from marinbuild.load.loader import LoadedWorkspace
from marinbuild.load.repos import resolve_load
from marinbuild.load.rules import RuleType
from marinbuild.load.sources import StatCache, hash_source_file
from marinbuild.load.target import Target
from marinbuild.load.trusted import import_rules_module
from marinbuild.load.workspace import Workspace
from marinbuild.run.shipped_code import ship_by_value, ship_imported_through

_RULES: dict[str, RuleType] = {}
"""Rule types met during analysis in this process, by ``rule_key``. Process-wide on purpose: a rule type
lives in an imported rules module, and imported modules are per process (``sys.modules``); a key names
the same rule in every build of the process."""


def rule_key(rule: RuleType) -> str:
    """``defined_in%name``, interned: every target of a rule keeps it in its step's config."""
    return sys.intern(f"{rule.defined_in}%{rule.name}")


@dataclass(frozen=True)
class SourceFile:
    """A workspace file read by a step: its label and digest are versioned, its path is not."""

    label: Any
    xxh3: Any
    path: str


@dataclass(frozen=True, slots=True)
class TargetConfig:
    """The config of a step made from a BUILD target (``__slots__``: a build holds one, and a copy, per step)."""

    label: str
    rule: Any  # ``versioned("<rule name>")``: changing a target's rule type changes its version.
    rule_key: str
    workspace: str
    attrs: dict[str, Any]
    output_path: Any = field(default_factory=this_output_path)
    code: dict[str, Any] | None = None
    """The code the step runs: name -> ``{"path", "xxh3"}`` (``marinbuild.engine.code_records``); ``versioned`` where
    the digest is part of the key (``python_step``'s ``fn`` module, by default), plain (no effect on the
    version) for the rule's own module."""


@dataclass(frozen=True)
class RuleContext:
    """What a rule implementation receives: its target, resolved attributes, and where to write."""

    label: str
    name: str
    package: str
    output_path: str
    attr: Struct
    workspace: Path


def run_target(config: TargetConfig) -> Any:
    """The step function of every ordinary target: call its rule's implementation."""
    rule = _RULES.get(config.rule_key) or _import_rule(config.rule_key, Path(config.workspace))
    label = parse_label(config.label)
    attr = Struct(**{k: _resolve(v) for k, v in config.attrs.items()})
    ctx = RuleContext(config.label, label.name, label.package, config.output_path, attr, Path(config.workspace))
    assert rule.implementation is not None
    return rule.implementation(ctx)


def _resolve(value: Any) -> Any:
    """Instantiated attribute values as implementations see them: source files as paths."""
    if isinstance(value, SourceFile):
        return value.path
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    if isinstance(value, dict) and value.get("__mixture__") is True:
        return {path: weight for path, weight in value["entries"]}
    if isinstance(value, dict):
        return {k: _resolve(v) for k, v in value.items()}
    return value


def _import_rule(key: str, workspace: Path) -> RuleType:
    """Find a rule type from its key in a process that did not load the BUILD files (a remote worker)."""
    file_label, _, name = key.rpartition("%")
    where = resolve_load(parse_label(file_label), workspace)
    if where.trusted_root is None:
        raise LookupError(f"rule {name} from {file_label} is not in a rules/ module and cannot be imported here")
    rule = getattr(import_rules_module(where.path, where.trusted_root, where.module_parts, file_label), name)
    _RULES[key] = rule
    return rule


@dataclass
class Analysis:
    """The steps of the analysed targets."""

    step_of: dict[Label, ExecutorStep] = field(default_factory=dict)
    """Each target's own step (the one label dependencies point at); absent for a group of steps."""
    steps_of: dict[Label, list[ExecutorStep]] = field(default_factory=dict)  # Every step a target asks to build.
    code_entries: dict[tuple[Any, ...], dict[str, Any] | None] = field(default_factory=dict)
    """``_code_of``'s answers of this analysis: thousands of targets of one rule share their few code files, each
    found, resolved and hashed once."""
    shared: dict[Any, Any] = field(default_factory=dict)  # ``AnalysisContext.once``'s answers of this analysis, by key.
    common: dict[tuple[str, str], Any] = field(default_factory=dict)
    """One object for a value every target's config holds alike (the workspace root, a rule's versioned name),
    instead of a copy per step."""

    def requested_steps(self, labels: Iterable[Label]) -> list[ExecutorStep]:
        return [step for label in labels for step in self.steps_of[label]]


class AnalysisContext:
    """What an ``analyze`` hook receives: the target, its workspace, and its dependencies' steps."""

    def __init__(
        self,
        target: Target,
        workspace: Workspace,
        analysis: Analysis,
        loaded: LoadedWorkspace | None = None,
        stat_cache: StatCache | None = None,
    ):
        self.target = target
        self.workspace = workspace
        self._analysis = analysis
        self._loaded = loaded
        self.stat_cache = stat_cache

    def target_step(self, code: dict[str, tuple[Path, bool]] | None = None) -> ExecutorStep:
        """An ordinary target's step; ``code``: name -> (a Python file it runs, whether its digest is in the key)."""
        assert self._loaded is not None
        return _target_step(self.target, self._loaded, self.workspace, self._analysis, self.stat_cache, code)

    @property
    def attr(self) -> Struct:
        return Struct(**{k: thaw(v) for k, v in self.target.attrs.items()})

    def attr_value(self, name: str) -> Any:
        """One attribute's value as ``attr`` gives it, without thawing the others (hooks on thousands of targets)."""
        return thaw(self.target.attrs[name])

    def once(self, key: Any, compute: Callable[[], Any]) -> Any:
        """``compute()``, called once per analysis for each hashable ``key`` (naming what and from what): for answers
        thousands of targets share, such as where a module's file is; none is kept beyond the analysis."""
        shared = self._analysis.shared
        if key not in shared:
            shared[key] = compute()
        return shared[key]

    @property
    def package_dir(self) -> Path:
        return self.workspace.package_dir(self.target.label.package)

    def step_of(self, label: Label) -> ExecutorStep:
        return self._analysis.step_of[label]

    def error(self, message: str) -> BuildFileError:
        return BuildFileError.at(self.target.location, message)


def analyze(
    loaded: LoadedWorkspace, roots: Iterable[Label], workspace: Workspace, stat_cache: StatCache | None = None
) -> Analysis:
    """Steps for ``roots`` and every target they depend on (dependencies first, no recursion)."""
    analysis = Analysis()
    for label in loaded.closure(list(roots)):
        target = loaded.targets[label]
        rule = target.rule
        if rule.analyze is not None:
            result = rule.analyze(AnalysisContext(target, workspace, analysis, loaded, stat_cache))
            steps = list(result) if isinstance(result, list | tuple) else [result]
            if not steps or not all(isinstance(s, ExecutorStep) for s in steps):
                raise BuildFileError.at(target.location, f"{target.kind} produced no ExecutorStep for {label}")
            analysis.steps_of[label] = steps
            if len(steps) == 1:
                analysis.step_of[label] = steps[0]
            continue
        step = _target_step(target, loaded, workspace, analysis, stat_cache)
        analysis.step_of[label] = step
        analysis.steps_of[label] = [step]
    return analysis


def _target_step(
    target: Target,
    loaded: LoadedWorkspace,
    workspace: Workspace,
    analysis: Analysis,
    stat_cache: StatCache | None,
    code: dict[str, tuple[Path, bool]] | None = None,
) -> ExecutorStep:
    rule = target.rule
    _RULES[key := rule_key(rule)] = rule
    sources = dict(zip(target.srcs, target.source_paths, strict=True))

    def label_value(label: Label, attr_name: str) -> Any:
        if label in loaded.targets:
            step = analysis.step_of.get(label)
            if step is None:
                raise BuildFileError.at(
                    target.location,
                    f"attribute {attr_name!r} of {target.label}: {label} stands for several steps; "
                    f"depend on one of them (give its script target steps = [...])",
                )
            return output_path_of(step)
        path = sources[label]
        return SourceFile(
            label=versioned(str(label)), xxh3=versioned(hash_source_file(path, stat_cache)), path=str(path)
        )

    attrs: dict[str, Any] = {}
    for name, value in target.attrs.items():
        spec = rule.attrs[name]
        if value is None:
            attrs[name] = versioned(None) if spec.versioned else None
        elif isinstance(spec, LabelAttr):
            attrs[name] = label_value(value, name)
        elif isinstance(spec, LabelListAttr):
            attrs[name] = [label_value(v, name) for v in value]
        elif isinstance(spec, CheckpointAttr):
            producer = label_value(value.label, name)
            if isinstance(producer, SourceFile):
                message = f"attribute {name!r} of {target.label}: checkpoint() takes a target, {value.label} is a file"
                raise BuildFileError.at(target.location, message)
            attrs[name] = producer.cd(f"checkpoints/step-{value.step}").nonblocking()
        elif isinstance(spec, LabelKeyedDictAttr):
            entries = [
                [label_value(k, name), versioned(thaw(w)) if spec.versioned else thaw(w)] for k, w in value.items()
            ]
            attrs[name] = {"__mixture__": True, "entries": entries}
        else:
            plain = thaw(value)
            attrs[name] = versioned(plain) if spec.versioned else plain
    output_name = rule.output_name or "{package}/{name}"
    step_name = output_name.format(package=target.label.package, name=target.label.name).strip("/")
    return ExecutorStep(
        name=step_name,
        fn=run_target,
        config=TargetConfig(
            label=str(target.label),
            rule=_common(analysis, "rule", rule.name, versioned),
            rule_key=key,
            workspace=_common(analysis, "workspace", workspace.root, str),
            attrs=attrs,
            code=_code_of(rule, workspace, stat_cache, code or {}, analysis.code_entries),
        ),
        description=rule.doc or None,
        resources=None if (resources := target.attrs.get("resources")) is None else thaw(resources),
        override_output_path=str(path) if (path := target.attrs.get("override_output_path")) else None,
    )


def _common(analysis: Analysis, kind: str, value: Any, make: Callable[[Any], Any]) -> Any:
    """``make(value)``, made once per analysis (``Analysis.common``)."""
    key = (kind, str(value))
    made = analysis.common.get(key)
    if made is None:
        made = analysis.common[key] = make(value)
    return made


def _code_of(
    rule: RuleType,
    workspace: Workspace,
    stat_cache: StatCache | None,
    extra: dict[str, tuple[Path, bool]],
    known: dict[tuple[Any, ...], dict[str, Any] | None],
) -> dict[str, Any] | None:
    """A target step's ``code``: the rule's module (never in the key) and ``extra`` files; from ``known`` (this
    analysis's earlier answers) when another target asked the same. The targets asking the same share one dict
    (a ``TargetConfig`` is frozen and nothing changes its ``code``): a copy per target was ~2% of the peak memory
    of ``bench/run.py``'s layered 100,000 ``incremental`` row (``marinbuild-cli``)."""
    import inspect

    key = (rule.implementation, *sorted(extra.items()))
    if key in known:
        return known[key]
    files: dict[str, tuple[Path, bool]] = {}
    try:
        module_file = inspect.getsourcefile(rule.implementation) if rule.implementation is not None else None
    except TypeError:
        module_file = None
    if module_file is not None:
        files["rule"] = (Path(module_file), False)
    files.update(extra)
    code: dict[str, Any] = {}
    for name, (path, in_key) in files.items():
        digest = file_digest(path, stat_cache)
        if digest is None:
            continue
        entry = {"path": display_path(path, workspace.root, stat_cache), "xxh3": digest}
        code[name] = versioned(entry) if in_key else entry
    known[key] = code or None
    return known[key]


def load_script_steps(script: Path, workspace_root: Path) -> dict[str, ExecutorStep]:
    """Import a Python experiment script (not as ``__main__``) and return its module-level steps by variable.

    It is imported as ``python script.py`` runs it (its folder and the workspace root on ``sys.path`` meanwhile) under a
    module name of its own. No worker can import that name, nor modules it imported by bare name from its folder: both
    are recorded to go to Ray tasks by value (``run.shipped_code``)."""
    module_name = "_marinbuild_script_" + "_".join(script.relative_to(workspace_root).with_suffix("").parts)
    spec = importlib.util.spec_from_file_location(module_name, script)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {script}")
    module = importlib.util.module_from_spec(spec)
    added = [p for p in dict.fromkeys([str(script.parent), str(workspace_root)]) if p not in sys.path]
    sys.path[:0] = added
    before = set(sys.modules)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        for path in added:
            sys.path.remove(path)
    ship_by_value(module_name)
    if script.parent.resolve() != workspace_root.resolve():
        ship_imported_through(script.parent, set(sys.modules) - before)
    return {k: v for k, v in vars(module).items() if isinstance(v, ExecutorStep)}


def leaf_steps(steps: dict[str, ExecutorStep]) -> list[ExecutorStep]:
    """The steps no other of ``steps`` depends on (what the script builds), in definition order."""
    used: set[int] = set()
    for step in steps.values():
        used.update(id(s) for s in upstream_steps(step.config))
    return [s for s in steps.values() if id(s) not in used]
