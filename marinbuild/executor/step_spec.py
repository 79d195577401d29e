"""Marin's ``StepSpec`` (``marin.execution.step_spec``) and ``resolve_executor_step``.

A ``StepSpec`` (name, dependencies, hashed attributes, ``fn(output_path)``) lives at ``<prefix>/<name>_<sha256 of name,
attrs and deps>[:8]``; ``resolve_executor_step`` and ``as_executor_step`` convert as in Marin. The callables made here
are picklable objects, not closures, so they run on Ray workers."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from marinbuild.core.placeholders import ORIGINAL_STEP_SPEC, THIS_OUTPUT_PATH, ExecutorStep, VersionedValue
from marinbuild.run.step_call import MirrorScope
from marinbuild.store.fs import default_prefix


def _is_relative_path(url_or_path: str) -> bool:
    from urllib.parse import urlparse

    return not urlparse(url_or_path).scheme and not url_or_path.startswith("/")


@dataclass(frozen=True)
class _StepSpecMigrationConfig:
    """The config of ``StepSpec.as_executor_step``'s step (Marin's fields)."""

    output_path: Any
    attrs: Any
    deps: list = field(default_factory=list)


@dataclass(frozen=True)
class StepSpec:
    """A step's identity, dependencies and function of its output path (Marin's fields and derived values)."""

    name: str
    output_path_prefix: str | None = None  # default $MARIN_PREFIX (as executor_main's)
    deps: list[StepSpec] = field(default_factory=list)
    hash_attrs: dict[str, Any] = field(default_factory=dict)  # what else identifies the step (JSON), hashed
    override_output_path: str | None = None
    fn: Callable[[str], Any] | None = None  # called with the output path; may be a remote(...) wrapper
    resources: Any = None

    @cached_property
    def dep_paths(self) -> list[str]:
        return [dep.output_path for dep in self.deps]

    @cached_property
    def dep_names(self) -> list[str]:
        return [dep.name_with_hash for dep in self.deps]

    @cached_property
    def hash_id(self) -> str:
        content = json.dumps(
            {"name": self.name, "attrs": self.hash_attrs, "deps": sorted(self.dep_names)}, sort_keys=True
        )
        return hashlib.sha256(content.encode("utf-8")).hexdigest()[:8]

    @cached_property
    def name_with_hash(self) -> str:
        return f"{self.name}_{self.hash_id}"

    @cached_property
    def output_path(self) -> str:
        prefix = self.output_path_prefix or default_prefix()
        if self.override_output_path is not None:
            if _is_relative_path(self.override_output_path):
                return f"{prefix}/{self.override_output_path}"
            return self.override_output_path
        return f"{prefix}/{self.name_with_hash}"

    def as_executor_step(self) -> ExecutorStep:
        """This step as an ``ExecutorStep`` at its output path (``resolve_executor_step`` of it gives ``self``)."""
        config = _StepSpecMigrationConfig(
            output_path=THIS_OUTPUT_PATH,
            attrs=VersionedValue(self.hash_attrs),
            deps=[dep.as_executor_step() for dep in self.deps],
        )
        step = ExecutorStep(
            name=self.name, fn=self.fn, config=config, override_output_path=self.output_path, resources=self.resources
        )
        object.__setattr__(step, ORIGINAL_STEP_SPEC, self)
        return step

    def executor_function(self) -> Any:
        """What the executor calls with the config of ``as_executor_step``'s step (None without ``fn``)."""
        return None if self.fn is None else _rewrap(self.fn, OutputPathCall)


@dataclass(frozen=True)
class ConfigCall:
    """An ``ExecutorStep``'s ``fn(config)`` as a ``StepSpec``'s function of the output path (in the config)."""

    fn: Callable[[Any], Any]
    config: Any
    mirror_budget_gb: float | None = None

    def __call__(self, output_path: str) -> Any:
        return MirrorScope(self.mirror_budget_gb).run(self.fn, self.config)


@dataclass(frozen=True)
class OutputPathCall:
    """A ``StepSpec``'s ``fn(output_path)`` called as an ``ExecutorStep``'s ``fn(config)``."""

    fn: Callable[[str], Any]

    def __call__(self, config: Any) -> Any:
        return self.fn(config.output_path)


def _rewrap(fn: Any, make: Callable[[Any], Any]) -> Any:
    """``make(fn)``, inside the same ``remote(...)`` wrapper if ``fn`` has one (its resources stay with it)."""
    inner = getattr(fn, "fn", None)
    if dataclasses.is_dataclass(fn) and not isinstance(fn, type) and callable(inner) and hasattr(fn, "resources"):
        return dataclasses.replace(fn, fn=make(inner))
    return make(fn)


def resolve_executor_step(
    step: ExecutorStep,
    config: Any,
    output_path: str,
    deps: list[StepSpec] | None = None,
    dag_tpu_regions: list[str] | None = None,
    forced_region: str | None = None,
    mirror_budget_gb: float | None = None,
) -> StepSpec:
    """An ``ExecutorStep`` with its instantiated config and output path as a ``StepSpec`` (Marin's signature), run under
    a ``mirror_budget_gb`` budget when given; the Iris-only region pins are ignored, as Marin does elsewhere."""
    original: StepSpec | None = getattr(step, ORIGINAL_STEP_SPEC, None)
    if original is not None:
        return dataclasses.replace(
            original,
            deps=deps or list(original.deps),
            override_output_path=original.output_path,
            resources=original.resources,
        )
    if step.fn is None:
        raise ValueError(f"Step {step.name} has no callable")
    fn = _rewrap(step.fn, lambda inner: ConfigCall(inner, config, mirror_budget_gb))
    return StepSpec(name=step.name, deps=deps or [], override_output_path=output_path, fn=fn, resources=step.resources)
