"""What a step's job calls: the step's function with its instantiated config (``run/step_call.py``). A step
from Marin's ``StepSpec`` keeps it (``ORIGINAL_STEP_SPEC``): the engine imports nothing of Marin's face."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from marinbuild.core.placeholders import ORIGINAL_STEP_SPEC
from marinbuild.core.walk import max_mirror_budget
from marinbuild.run.step_call import StepCall

if TYPE_CHECKING:
    from marinbuild.core.placeholders import ExecutorStep


def call_for(step: ExecutorStep, config: Any, prefix: str) -> StepCall:
    """The call of ``step`` with ``config`` (its instantiated config); ``ValueError`` for a step without a function."""
    original = getattr(step, ORIGINAL_STEP_SPEC, None)
    fn = step.fn if original is None else original.executor_function()
    if fn is None:
        raise ValueError(f"step {step.name} has no fn to run")
    return StepCall(
        fn,
        config,
        step.resources,
        step.pip_dependency_groups,
        mirror_budget_gb=max_mirror_budget(step.config),
        mirror_prefix=prefix,
    )
