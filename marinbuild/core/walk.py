"""Walking step configs: finding placeholders, collecting versions, resolving placeholders.

Marin's semantics: dataclasses, dicts, lists, tuples and sets are walked; ``VersionedValue`` contributes ``prefix ->
value``, ``InputName``/``ExecutorStep`` ``prefix -> "DEP[i]/sub"`` and a dependency; ``MirroredValue`` is transparent.
Recursion follows one config's nesting, never the graph's depth. ``instantiate_config`` is a module-level function, not
a self-calling closure: that would be a reference cycle, left to the cyclic collector, which is paused while versions
are computed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass, replace
from sys import intern
from typing import Any, TypeVar
from urllib.parse import urlparse

from marinbuild.core.placeholders import (
    ExecutorStep,
    InputName,
    MirroredValue,
    OutputName,
    VersionedValue,
    output_path_of,
)

ConfigT = TypeVar("ConfigT")


@dataclass(frozen=True)
class InputNameEvent:
    prefix: str
    input_name: InputName


@dataclass(frozen=True)
class VersionedEvent:
    prefix: str
    value: Any


_PLAIN = frozenset({type(None), str, int, float, bool, bytes})
"""Exact types that stand for themselves in an instantiated config and hold no placeholder."""
_LEAVES = (InputName, VersionedValue)


def walk_config(obj: Any) -> Iterator[InputNameEvent | VersionedEvent]:
    """An event per ``InputName``/``VersionedValue`` in ``obj`` in walk order (a step as ``InputName(step, None)``)."""
    for prefix, value in _placeholders(obj):
        if isinstance(value, InputName):
            yield InputNameEvent(prefix, value)
        else:
            yield VersionedEvent(prefix, value.value)


def _placeholders(obj: Any) -> list[tuple[str, Any]]:
    """``(prefix, placeholder)`` per placeholder: ``walk_config`` without a generator or event objects."""
    found: list[tuple[str, Any]] = []
    _walk(obj, "", found)
    return found


def _walk(obj: Any, prefix: str, found: list[tuple[str, Any]]) -> None:
    cls = type(obj)
    if cls in _PLAIN:
        return
    other = cls is not dict and cls is not list  # the common containers skip the placeholder and dataclass checks
    if other and isinstance(obj, _LEAVES):
        found.append((prefix, obj))
    elif other and isinstance(obj, ExecutorStep):
        found.append((prefix, output_path_of(obj, None)))
    elif other and isinstance(obj, MirroredValue):
        _walk(obj.value, prefix, found)
    elif other and hasattr(cls, "__dataclass_fields__"):
        for field in fields(obj):
            _walk(getattr(obj, field.name), f"{prefix}.{field.name}" if prefix else field.name, found)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, str):
                raise ValueError(f"dict keys must be strs, but got {k} (type: {type(k)})")
            _walk(v, f"{prefix}.{k}" if prefix else k, found)
    elif isinstance(obj, list | tuple | set | frozenset):
        for i, item in enumerate(obj):
            _walk(item, f"{prefix}.[{i}]" if prefix else f"[{i}]", found)


def upstream_steps(obj: Any) -> list[ExecutorStep]:
    """The distinct steps referenced by placeholders in ``obj``, in discovery order."""
    seen: dict[int, ExecutorStep] = {}
    for _, value in _placeholders(obj):
        if isinstance(value, InputName) and value.step is not None:
            seen.setdefault(id(value.step), value.step)
    return list(seen.values())


@dataclass(frozen=True)
class Dependencies:
    """A config's blocking dependencies, pseudo-dependencies, and versioned values (``prefix -> value``)."""

    dependencies: list[ExecutorStep]
    pseudo_dependencies: list[ExecutorStep]
    version: dict[str, Any]


def dependency_index_str(i: int) -> str:
    return f"DEP[{i}]"


def collect_dependencies_and_version(obj: Any) -> Dependencies:
    """Versioned values and dependencies of a config, with Marin's ``DEP[i]`` numbering (blocking and pseudo together,
    in walk order). The version's keys are interned: every step of a rule has the same ones."""
    pseudo: list[ExecutorStep] = []
    blocking: list[ExecutorStep] = []
    version: dict[str, Any] = {}
    for prefix, value in _placeholders(obj):
        key = intern(prefix)
        if not isinstance(value, InputName):
            version[key] = value.value
            continue
        if value.step is None:
            version[key] = value.name
            continue
        index = len(blocking) + len(pseudo)
        (blocking if value.block_on_step else pseudo).append(value.step)
        version[key] = f"DEP[{index}]/{value.name}" if value.name else f"DEP[{index}]"
    return Dependencies(blocking, pseudo, version)


def make_prefix_absolute_path(prefix: str, path: str) -> str:
    """``path`` under ``prefix`` unless it has a URL scheme or starts with ``/``."""
    return path if urlparse(path).scheme or path.startswith("/") else os.path.join(prefix, path)


def _join(base: str, name: str | None) -> str:
    return os.path.join(base, name) if name else base


def _rebuild(obj: Any, fn: Any) -> Any:
    """``obj`` with ``fn`` applied to each item of a dataclass (init fields), list, dict or tuple (named too)."""
    if hasattr(type(obj), "__dataclass_fields__") and not isinstance(obj, type):
        return replace(obj, **{f.name: fn(getattr(obj, f.name)) for f in fields(obj) if f.init})
    if isinstance(obj, list):
        return [fn(x) for x in obj]
    if isinstance(obj, dict):
        return {k: fn(v) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return type(obj)(*map(fn, obj)) if hasattr(obj, "_fields") else tuple(map(fn, obj))
    return obj


def instantiate_config(obj: Any, output_path: str | None, output_paths: dict[ExecutorStep, str], prefix: str) -> Any:
    """``obj`` with every placeholder replaced by its value or path (``MirroredValue``: ``mirror://``)."""
    cls = type(obj)
    if cls in _PLAIN:
        return obj
    if isinstance(obj, list):  # no placeholder is a list, a dict or a tuple: the common containers first
        return [instantiate_config(x, output_path, output_paths, prefix) for x in obj]
    if isinstance(obj, dict):
        return {k: instantiate_config(v, output_path, output_paths, prefix) for k, v in obj.items()}
    if isinstance(obj, VersionedValue):  # plain data, but a BUILD file's mirrored() may sit inside
        return instantiate_config(obj.value, output_path, output_paths, prefix)
    if isinstance(obj, ExecutorStep):
        obj = output_path_of(obj)
    if isinstance(obj, MirroredValue):
        inner = instantiate_config(obj.value, output_path, output_paths, prefix)
        if isinstance(inner, str) and not inner.startswith("mirror://"):
            return f"mirror://{inner}"
        return inner
    if isinstance(obj, InputName):
        if obj.step is None:
            return make_prefix_absolute_path(prefix, obj.name or "")
        return _join(output_paths[obj.step], obj.name)
    if isinstance(obj, OutputName):
        if output_path is None:
            raise ValueError(
                f"cannot resolve OutputName({obj.name!r}): the config has no output_path and none was passed"
            )
        return _join(output_path, obj.name)
    return _rebuild(obj, lambda x: instantiate_config(x, output_path, output_paths, prefix))


def resolve_local_placeholders(config: ConfigT, output_path: str) -> ConfigT:
    """Resolve ``OutputName`` paths and ``VersionedValue`` wrappers, keeping references and ``MirroredValue``s."""

    def recurse(obj: Any) -> Any:
        if isinstance(obj, OutputName):
            return _join(output_path, obj.name)
        if isinstance(obj, MirroredValue):
            return replace(obj, value=recurse(obj.value))
        if isinstance(obj, VersionedValue):
            return recurse(obj.value)
        if isinstance(obj, InputName | ExecutorStep):
            return obj
        return _rebuild(obj, recurse)

    return recurse(config)


def unwrap_versioned_value(value: Any) -> Any:
    """Strip ``VersionedValue``/``MirroredValue`` wrappers in ``value`` (execution paths cannot be)."""

    def recurse(obj: Any) -> Any:
        if isinstance(obj, MirroredValue | VersionedValue):
            return recurse(obj.value)
        if isinstance(obj, OutputName | InputName | ExecutorStep):
            raise ValueError(f"Cannot unwrap VersionedValue containing {type(obj)}: {obj}")
        return obj if isinstance(obj, tuple) else _rebuild(obj, recurse)  # Marin's: tuples as they are

    return recurse(value)


def max_mirror_budget(config: Any) -> float | None:
    """The largest ``budget_gb`` of the ``MirroredValue``s in a raw config, or None if it has none."""
    best: float | None = None
    stack = [config]
    while stack:
        obj = stack.pop()
        if type(obj) in _PLAIN or isinstance(obj, OutputName | InputName | ExecutorStep):
            continue
        if isinstance(obj, MirroredValue):
            best = obj.budget_gb if best is None else max(best, obj.budget_gb)
        elif isinstance(obj, VersionedValue):
            stack.append(obj.value)
        elif is_dataclass(obj) and not isinstance(obj, type):
            stack.extend(getattr(obj, f.name) for f in fields(obj))
        elif isinstance(obj, list | tuple):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
    return best
