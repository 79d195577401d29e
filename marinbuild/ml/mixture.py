"""The weights of a ``train_lm`` data mixture, fixed or changing at given steps (pure Python).

Fixed: ``data = {":a": 0.7, ":b": 0.3}``. Changing (Marin's ``lm_varying_mixture_data_config``): a weight per stage,
``data = {":a": [0.7, 0.3], ":b": [0.3, 0.7]}`` with ``data_steps = [0, N]`` (a plain number: the same in every stage).
``mixture_weights`` gives levanter's ``LmDataConfig.train_weights``: a dict, or a list of ``(start_step, {name:
weight})``. The same checks run when the BUILD file loads and in the training process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from marinbuild.load.attrs import Attr, AttrValueError, describe


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class MixtureWeightAttr(Attr):
    """A component's weight: a number, or a list of numbers (one per stage of ``data_steps``), kept as floats."""

    type_name = "mixture_weight"

    def convert(self, value: Any, package: str) -> float | tuple[float, ...]:
        if _is_number(value):
            return float(value)
        if isinstance(value, list | tuple) and value and all(_is_number(x) for x in value):
            return tuple(float(x) for x in value)
        raise AttrValueError(f"expected a number or a list of numbers (one per data_steps), got {describe(value)}")


def mixture_weights(data: Mapping[Any, Any], steps: Sequence[int]) -> dict[Any, float] | list[Any]:
    """levanter's ``train_weights`` for ``data`` changing at ``steps``, or an ``AttrValueError`` saying why not."""
    if any(isinstance(s, bool) or not isinstance(s, int) for s in steps):
        raise AttrValueError(f"data_steps must be ints, got {list(steps)!r}", attr="data_steps")
    if steps and (steps[0] != 0 or any(b <= a for a, b in zip(steps, steps[1:], strict=False))):
        raise AttrValueError(f"data_steps start at 0 and increase, got {list(steps)!r}", attr="data_steps")
    for key, weight in data.items():
        if not _is_number(weight) and len(weight) != len(steps):
            wrong = "data_steps is empty" if not steps else f"there are {len(steps)} data_steps"
            raise AttrValueError(f"weight of {key}: {len(weight)} weights, but {wrong}", attr="data")
    stages = [{k: (w if _is_number(w) else w[i]) for k, w in data.items()} for i in range(max(len(steps), 1))]
    for i, stage in enumerate(stages):
        if any(w < 0 for w in stage.values()):
            shown = {str(k): w for k, w in stage.items()}
            raise AttrValueError(f"mixture weights cannot be negative, got {shown!r}", attr="data")
        if not any(w > 0 for w in stage.values()):
            where = f" from step {steps[i]}" if steps else ""
            raise AttrValueError(
                f"the mixture{where} needs at least one tokenized target with a positive weight", attr="data"
            )
    if not steps:
        return {k: float(w) for k, w in stages[0].items()}
    return [[step, {k: float(w) for k, w in stage.items()}] for step, stage in zip(steps, stages, strict=True)]
