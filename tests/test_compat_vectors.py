"""Versions and output paths must equal those Marin's own executor computed (tests/compat: where they came from)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
from functools import cache
from typing import Any

import pytest

from marinbuild.executor import (
    Executor,
    ExecutorStep,
    InputName,
    mirrored,
    output_path_of,
    this_output_path,
    versioned,
)

VECTORS = pathlib.Path(__file__).resolve().parent / "compat" / "marin_vectors.json"


def _cases() -> list[dict[str, Any]]:
    return json.loads(VECTORS.read_text())["cases"]


@cache
def _dataclass(name: str, fields: tuple[str, ...]) -> type:
    return dataclasses.make_dataclass(name, [(f, Any) for f in fields], frozen=True)


def _decode(value: Any, steps: dict[str, ExecutorStep]) -> Any:
    if isinstance(value, list):
        return [_decode(v, steps) for v in value]
    if not isinstance(value, dict):
        return value
    if "$v" in value:
        return versioned(_decode(value["$v"], steps))
    if "$in" in value:
        name = output_path_of(steps[value["$in"]], value.get("sub"))
        return name.nonblocking() if value.get("nb") else name
    if "$cd" in value:
        name = steps[value["$cd"]].cd(value["path"])
        return name.nonblocking() if value.get("nb") else name
    if "$step" in value:
        return steps[value["$step"]]
    if "$hard" in value:
        return InputName.hardcoded(value["$hard"])
    if "$out" in value:
        return this_output_path(value["$out"])
    if "$mir" in value:
        return mirrored(_decode(value["$mir"], steps), budget_gb=value.get("budget", 10))
    if "$dc" in value:
        cls = _dataclass(value["$dc"], tuple(f for f, _ in value["f"]))
        return cls(**{f: _decode(v, steps) for f, v in value["f"]})
    if "$path" in value:
        return pathlib.Path(value["$path"])
    if "$tuple" in value:
        return tuple(_decode(v, steps) for v in value["$tuple"])
    return {k: _decode(v, steps) for k, v in value.items()}


def _computed(case: dict[str, Any]) -> tuple[dict[str, ExecutorStep], Executor]:
    """The case's steps (by id) and an executor that computed their versions, in the case's order."""
    steps: dict[str, ExecutorStep] = {}
    for spec in case["steps"]:
        steps[spec["id"]] = ExecutorStep(
            name=spec["name"], fn=None, config=_decode(spec["config"], steps), override_output_path=spec.get("override")
        )
    executor = Executor(prefix="/pfx", executor_info_base_path="/pfx/experiments")
    for step in steps.values():
        executor.compute_version(step, is_pseudo_dep=False)
    return steps, executor


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["case"])
def test_marin_vectors(case: dict[str, Any]) -> None:
    steps, executor = _computed(case)
    for step_id, expect in case["expect"].items():
        step = steps[step_id]
        assert executor.version_strs[step] == expect["version_str"], step_id
        assert executor.output_paths[step] == expect["output_path"], step_id
        assert json.dumps(executor.versions[step], sort_keys=True) == expect["version_str"], step_id


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["case"])
def test_step_info_text_is_marins_indented_json(case: dict[str, Any]) -> None:
    """A step's ``.executor_info`` text is byte for byte Marin's ``json.dumps(info, indent=2)``, nested versions
    included."""
    steps, executor = _computed(case)
    for step in steps.values():
        text = executor.info_text(executor.canonicalize(step))
        info = json.loads(text)
        assert info["version"] == executor.versions[executor.canonicalize(step)]
        assert text == json.dumps(info, indent=2)


# Marin's own code for the info files (marin/execution/executor.py and marin/utilities/json_encoder.py of
# marin-core 0.2.20.dev202606180959, Apache-2.0), copied here so that marinbuild's text is checked against
# Marin's algorithm rather than against itself. Only the jax dtype branch of the encoder is left out.
class _MarinCustomJsonEncoder(json.JSONEncoder):
    def default(self, o):
        from datetime import timedelta
        from enum import Enum

        if isinstance(o, timedelta):
            return {"days": o.days, "seconds": o.seconds, "microseconds": o.microseconds}
        if isinstance(o, pathlib.Path):
            return str(o)
        if isinstance(o, Enum):
            return o.value
        if dataclasses.is_dataclass(o) and not isinstance(o, type):
            return dataclasses.asdict(o)
        try:
            return super().default(o)
        except TypeError:
            return str(o)


def _marin_asdict_without_description(obj: Any) -> dict[str, Any]:
    import copy

    def recurse(value: Any):
        if dataclasses.is_dataclass(value):
            return {f.name: recurse(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return type(value)(*(recurse(v) for v in value))
        if isinstance(value, list | tuple):
            return type(value)(recurse(v) for v in value)
        if isinstance(value, dict):
            return {recurse(k): recurse(v) for k, v in value.items()}
        return copy.deepcopy(value)

    d = recurse(obj)
    d.pop("description", None)
    return d


def _marin_step_info_texts(executor: Executor) -> list[str]:
    """What Marin's ``write_infos`` prints into each step's ``.executor_info``, from the executor's infos."""
    executor.get_infos()
    info = _marin_asdict_without_description(executor.executor_info)
    for step, step_info in zip(executor.steps, info["steps"], strict=True):
        step_info.pop("description", None)
        step_info["fn_name"] = "None" if step.fn is None else str(step.fn)  # Marin's get_fn_name (a plain function)
    return [json.dumps(step_info, indent=2, cls=_MarinCustomJsonEncoder) + "\n" for step_info in info["steps"]]


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["case"])
def test_executor_info_text_is_what_marins_write_infos_prints(case: dict[str, Any]) -> None:
    """Byte for byte Marin's text: with ``fn=None`` (as in the vectors) ``fn_name`` is ``"None"`` in both."""
    _, executor = _computed(case)
    expected = _marin_step_info_texts(executor)
    for step, text in zip(executor.steps, expected, strict=True):
        assert executor.info_text(step) + "\n" == text, step.name


def _a_step_function(config: Any) -> None:
    return None


def test_executor_info_text_differs_from_marins_only_in_fn_name() -> None:
    """Marin's ``fn_name`` is ``str(fn)`` (``<function f at 0x7f...>``, an address that changes every run);
    marinbuild's is ``module.qualname``. Everything else is the same text."""
    case = next(c for c in _cases() if c["case"] == "nested_dataclasses_lists_dicts")
    steps, _ = _computed(case)
    executor = Executor(prefix="/pfx", executor_info_base_path="/pfx/experiments")
    for step in steps.values():
        object.__setattr__(step, "__dict__", {**step.__dict__, "fn": _a_step_function})
        executor.compute_version(step, is_pseudo_dep=False)
    expected = _marin_step_info_texts(executor)
    marin_name = json.dumps(str(_a_step_function))
    ours = json.dumps(f"{__name__}._a_step_function")
    for step, text in zip(executor.steps, expected, strict=True):
        assert f'"fn_name": {marin_name},' in text
        assert executor.info_text(step) + "\n" == text.replace(marin_name, ours, 1)
