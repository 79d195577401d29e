"""Placeholder values of Marin's executor API that users put into step configs: steps, input/output names, versioned
values. Frozen dataclasses with Marin's fields and semantics (``marin.execution.types``), so scripts written for Marin
build the same graphs here. ``InputName``, ``OutputName`` and ``VersionedValue`` have slots (a build holds several per
step; a ``__dict__`` tripled their size); ``ExecutorStep`` keeps its ``__dict__``: ``step_spec`` adds an attribute to
steps it makes, and scripts written for Marin may too."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

ConfigT_co = TypeVar("ConfigT_co", covariant=True)
T_co = TypeVar("T_co", covariant=True)
T = TypeVar("T")

ExecutorFunction = Callable[..., Any] | None


@dataclass(frozen=True)
class ExecutorStep(Generic[ConfigT_co]):
    """One step: ``fn(config)`` writes under its output path; identity is the object, equal versions deduplicated."""

    name: str
    fn: ExecutorFunction
    config: ConfigT_co
    description: str | None = None
    override_output_path: str | None = None
    """Use this output path instead of ``<prefix>/<name>-<hash>`` (relative paths are under the prefix)."""
    resources: Any = None
    """What the step asks the backend for (CPUs, memory, GPUs, TPU slices); never part of the version."""
    pip_dependency_groups: list[str] | None = None
    """Extras or package names the step's environment needs; never part of the version."""

    def cd(self, name: str) -> InputName:
        """Refer to ``name`` under this step's output path."""
        return InputName(self, name=name)

    def __truediv__(self, other: str) -> InputName:
        return InputName(self, name=other)

    # Identity, as in Marin (whose __hash__ is id-based).
    __hash__ = object.__hash__
    __eq__ = object.__eq__

    def with_output_path(self, output_path: str) -> ExecutorStep:
        """A copy of the step that writes to ``output_path``."""
        return dataclasses.replace(self, override_output_path=output_path)

    def as_input_name(self) -> InputName:
        return InputName(step=self, name=None)


@dataclass(frozen=True, slots=True)
class InputName:
    """A previous ``step``'s output path joined with ``name`` (or a path under the prefix if ``step`` is None)."""

    step: ExecutorStep | None
    name: str | None
    block_on_step: bool = True  # False makes this a pseudo-dependency: part of the version, but not waited for or run.

    def cd(self, name: str) -> InputName:
        # As in Marin, the result is blocking even if ``self`` was not: hashes must match Marin's.
        return InputName(self.step, name=os.path.join(self.name, name) if self.name else name)

    def __truediv__(self, other: str) -> InputName:
        return self.cd(other)

    @staticmethod
    def hardcoded(path: str) -> InputName:
        """A path relative to the prefix that is not produced by a step of the pipeline."""
        return InputName(None, name=path)

    def nonblocking(self) -> InputName:
        """Depend on ``step`` for the version only: do not wait for it or run it."""
        return dataclasses.replace(self, block_on_step=False)


@dataclass(frozen=True, slots=True)
class OutputName:
    """This step's own output path joined with ``name``."""

    name: str | None


def this_output_path(name: str | None = None) -> OutputName:
    return OutputName(name=name)


THIS_OUTPUT_PATH = OutputName(None)

ORIGINAL_STEP_SPEC = "_original_step_spec"
"""The attribute (Marin's name) where an ``ExecutorStep`` made by ``StepSpec.as_executor_step`` keeps it."""


@dataclass(frozen=True, slots=True)
class VersionedValue(Generic[T_co]):
    """A config value that is part of the step's version."""

    value: T_co


@dataclass(frozen=True)
class MirroredValue(Generic[T_co]):
    """A path to be read through ``mirror://``: copied from whichever regional prefix holds it."""

    value: T_co
    budget_gb: float = 10


def output_path_of(step: ExecutorStep, name: str | None = None) -> InputName:
    return InputName(step=step, name=name)


def versioned(value: T) -> VersionedValue[T]:
    if isinstance(value, VersionedValue):
        raise ValueError("Can't nest VersionedValue")
    if isinstance(value, InputName):
        raise ValueError("Can't version an InputName")
    return VersionedValue(value)


def ensure_versioned(value: VersionedValue[T_co] | T_co) -> VersionedValue[T_co]:
    return value if isinstance(value, VersionedValue) else VersionedValue(value)


def mirrored(value: str | VersionedValue[str], budget_gb: float = 10) -> MirroredValue:
    """Mark a path for cross-region mirroring with a transfer budget (in GB)."""
    if isinstance(value, MirroredValue):
        raise ValueError("Can't nest MirroredValue")
    return MirroredValue(value=value, budget_gb=budget_gb)


def get_executor_step(run: ExecutorStep | InputName) -> ExecutorStep:
    """The ``ExecutorStep`` behind an ``InputName`` or a step."""
    if isinstance(run, ExecutorStep):
        return run
    if isinstance(run, InputName):
        if run.step is None:
            raise ValueError(f"Hardcoded path {run.name} is not part of the pipeline")
        return run.step
    raise ValueError(f"Unexpected type {type(run)} for run: {run}")
