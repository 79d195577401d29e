"""Attribute types of rules (the ``attr`` namespace) and the validation of values given to them.

Each ``Attr`` converts a BUILD file's value into its validated form (labels resolved against the package, lists to
tuples, dicts to ``FrozenDict``, configs to dataclasses). ``None`` means "not given", so macros can pass optional
arguments through."""

from __future__ import annotations

import builtins
import dataclasses
import re
import typing
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from marinbuild.core.labels import Label, LabelError, parse_label
from marinbuild.load.frozen import FrozenDict, is_mirrored, thaw

__all__ = ["Attr", "AttrValueError", "attr"]

_UNSET: Any = object()


class AttrValueError(ValueError):
    """A value does not fit an attribute's type (the rule call turns it into a located error).

    ``attr``: the attribute at fault, when a rule's ``check`` raises it (the error then points at that attribute in the
    BUILD file if it is written there, else at the rule call)."""

    def __init__(self, message: str, attr: str | None = None) -> None:
        super().__init__(message)
        self.attr = attr


def describe(value: Any) -> str:
    """``str 'fast'``: a value's type and (shortened) repr, as error messages show it."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


_SEGMENT = r"[A-Za-z0-9_-][A-Za-z0-9_.-]*"  # cannot be "." or "..": valid for packages and names alike
_PLAIN_NAME = re.compile(rf"{_SEGMENT}(?:/{_SEGMENT})*\Z")  # A target name ``validate_target_name`` certainly accepts.


def _to_label(value: Any, package: str) -> Label:
    if isinstance(value, Label):
        label = value
    elif isinstance(value, str):
        try:
            label = parse_label(value, package)
        except LabelError as exc:
            raise AttrValueError(str(exc)) from None
    else:
        raise AttrValueError(f"expected a label string, got {describe(value)}")
    if label.repo:
        raise AttrValueError(
            f"label {str(label)!r} is in repository @{label.repo}: only load() may refer to other repositories"
        )
    return label


def _is_sequence(value: Any) -> bool:
    cls = type(value)
    return cls is list or cls is tuple or isinstance(value, list | tuple)


def _is_mapping(value: Any) -> bool:
    cls = type(value)
    return cls is dict or cls is FrozenDict or isinstance(value, dict | Mapping)


_SCALARS = frozenset({str, int, float, bool, type(None)})
"""Exact types that attribute conversion passes through unchanged (in plain values and configs);
``_SCALARS.issuperset(map(type, values))`` checks a whole list or dict of them without a Python loop."""
_STR = frozenset({str})


class Attr:
    """An attribute declaration: its type (the subclass), ``mandatory``, ``default``, ``doc`` and ``versioned``.

    ``versioned`` attributes contribute to the target's version (its output hash); set it to False for things like
    resources or logging that do not change the output."""

    type_name = "value"
    has_labels = False  # whether values can contain labels (dependency edges)
    requires_files = False  # whether those labels must be source files

    def __init__(self, *, mandatory: bool = False, default: Any = _UNSET, doc: str = "", versioned: bool = True):
        if mandatory and default is not _UNSET:
            raise ValueError(f"attr.{self.type_name}(): an attribute cannot be both mandatory and have a default")
        if not isinstance(doc, str):
            raise TypeError(f"attr.{self.type_name}(): doc must be a string")
        self.mandatory = mandatory
        self.default = default
        self.doc = doc
        self.versioned = versioned

    def __repr__(self) -> str:
        return f"attr.{self.type_name}(mandatory={self.mandatory}, versioned={self.versioned})"

    def convert(self, value: Any, package: str) -> Any:
        """The validated form of ``value`` written in ``package`` (raises ``AttrValueError``)."""
        raise AttrValueError(f"attribute type {self.type_name} accepts no values")

    def empty(self) -> Any:
        """The value of an optional attribute that was not given and has no default."""
        return None

    def value_or_default(self, value: Any, package: str) -> Any:
        if value is None or value is _UNSET:
            if self.default is _UNSET or self.default is None:
                return self.empty()
            return self.convert(self.default, package)
        return self.convert(value, package)

    def labels(self, value: Any) -> Iterable[Label]:
        """The labels in a converted value (dependency edges)."""
        return ()


class LabelAttr(Attr):
    type_name = "label"
    has_labels = True

    def convert(self, value: Any, package: str) -> Label:
        return _to_label(value, package)

    def labels(self, value: Any) -> Iterable[Label]:
        return (value,) if value is not None else ()


class LabelListAttr(Attr):
    type_name = "label_list"
    has_labels = True

    def convert(self, value: Any, package: str) -> tuple[Label, ...]:
        if not _is_sequence(value):
            raise AttrValueError(f"expected a list of labels, got {describe(value)}")
        out = tuple([_to_label(x, package) for x in value])
        if len(set(out)) != len(out):
            seen: set[Label] = set()
            dup = next(x for x in out if x in seen or seen.add(x))  # type: ignore[func-returns-value]
            raise AttrValueError(f"label {str(dup)!r} appears more than once")
        return out

    def empty(self) -> tuple[Label, ...]:
        return ()

    def labels(self, value: Any) -> Iterable[Label]:
        return value


class SourceFilesAttr(LabelListAttr):
    """Files of the declaring package, e.g. ``glob(["data/*.jsonl"])``: relative paths or labels."""

    type_name = "source_files"
    requires_files = True

    def convert(self, value: Any, package: str) -> tuple[Label, ...]:
        out = LabelListAttr.convert(self, value, package)
        for label in out:
            if label.package != package:
                raise AttrValueError(
                    f"source file {str(label)!r} is not in this package ({'//' + package!r}): "
                    "list only files of the package here and depend on other packages' targets instead"
                )
        return out


def _element_attr(of: Any, where: str) -> Attr | None:
    if of is None or isinstance(of, Attr):
        return of
    if of in (builtins.str, builtins.int, builtins.float, builtins.bool):
        return {str: StringAttr, int: IntAttr, float: FloatAttr, bool: BoolAttr}[of]()
    raise TypeError(f"{where}: expected an attr.*() type or one of str, int, float, bool; got {of!r}")


def _convert_item(spec: Attr, item: Any, package: str, what: str, key: Any) -> Any:
    try:
        return spec.convert(item, package)
    except AttrValueError as exc:
        raise AttrValueError(f"{what} {key!r}: {exc}") from None


class LabelKeyedDictAttr(Attr):
    """A dict whose keys are labels and values are of type ``value`` (e.g. weights of a data mixture)."""

    type_name = "label_keyed_dict"
    has_labels = True

    def __init__(self, value: Any = builtins.float, **kwargs: Any):
        super().__init__(**kwargs)
        self.value_attr = _element_attr(value, "attr.label_keyed_dict(value=...)")

    def convert(self, value: Any, package: str) -> FrozenDict:
        if not _is_mapping(value):
            raise AttrValueError(f"expected a dict from labels to values, got {describe(value)}")
        out: dict[Label, Any] = {}
        for key, item in value.items():
            label = _to_label(key, package)
            if label in out:
                raise AttrValueError(f"label {str(label)!r} appears more than once as a key")
            if self.value_attr is not None:
                item = _convert_item(self.value_attr, item, package, "value for key", key)
            elif type(item) not in _SCALARS:
                item = _json_like(item, f"value for key {key!r}")
            out[label] = item
        return FrozenDict(out)

    def empty(self) -> FrozenDict:
        return FrozenDict()

    def labels(self, value: Any) -> Iterable[Label]:
        return value.keys()


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    """``checkpoint(":phase1", step = N)``: the checkpoint ``checkpoints/step-N`` of the target ``label``."""

    label: Label
    step: int


class CheckpointAttr(Attr):
    """A checkpoint of another target, written ``checkpoint(":phase1", step = N)``: a hand-off, versioned as Marin's
    ``phase1.cd("checkpoints/step-N").nonblocking()`` (the step waits for the checkpoint, not for the target)."""

    type_name = "checkpoint"
    has_labels = True

    def convert(self, value: Any, package: str) -> Checkpoint:
        if isinstance(value, Checkpoint):
            return value
        if not _is_mapping(value) or set(value) != {"checkpoint", "step"}:
            raise AttrValueError(f'expected checkpoint(":target", step = N), got {describe(value)}')
        step = value["step"]
        if type(step) is not builtins.int or step < 0:
            raise AttrValueError(f"checkpoint(): step must be an int >= 0 (N of checkpoints/step-N), got {step!r}")
        return Checkpoint(_to_label(value["checkpoint"], package), step)

    def labels(self, value: Any) -> Iterable[Label]:
        return (value.label,)


class StringAttr(Attr):
    """A string; with ``mirrorable``, a path or URL that may also be ``mirrored(path, budget_gb)``: the step gets
    ``mirror://path`` and the version is the plain path's."""

    type_name = "string"

    def __init__(self, *, values: Iterable[str] | None = None, mirrorable: bool = False, **kwargs: Any):
        super().__init__(**kwargs)
        self.values = tuple(values) if values is not None else None
        self.mirrorable = mirrorable

    def convert(self, value: Any, package: str) -> Any:
        if is_mirrored(value):
            if not self.mirrorable:
                raise AttrValueError("takes no mirrored(...): it is not a path a step reads")
            return FrozenDict(value)
        if not isinstance(value, str):
            raise AttrValueError(f"expected a string, got {describe(value)}")
        if self.values is not None and value not in self.values:
            raise AttrValueError(f"{value!r} is not one of {', '.join(map(repr, self.values))}")
        return value

    def empty(self) -> str:
        return ""


class IntAttr(Attr):
    type_name = "int"

    def convert(self, value: Any, package: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise AttrValueError(f"expected an int, got {describe(value)}")
        return value

    def empty(self) -> int:
        return 0


class FloatAttr(Attr):
    type_name = "float"

    def convert(self, value: Any, package: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise AttrValueError(f"expected a float (or int), got {describe(value)}")
        return float(value)

    def empty(self) -> float:
        return 0.0


class BoolAttr(Attr):
    type_name = "bool"

    def convert(self, value: Any, package: str) -> bool:
        if not isinstance(value, bool):
            raise AttrValueError(f"expected True or False, got {describe(value)}")
        return value

    def empty(self) -> bool:
        return False


def _json_like(value: Any, where: str) -> Any:
    """``value`` frozen, checking it holds only strings, numbers, booleans, None, labels, lists and dicts."""
    if type(value) in _SCALARS or isinstance(value, str | int | float | Label):
        return value
    if _is_sequence(value):
        if _SCALARS.issuperset(map(type, value)):
            return tuple(value)
        return tuple([x if type(x) in _SCALARS else _json_like(x, where) for x in value])
    if _is_mapping(value):
        if _STR.issuperset(map(type, value)) and _SCALARS.issuperset(map(type, value.values())):
            return FrozenDict(value)
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise AttrValueError(f"{where}: dict keys must be strings, got {describe(k)}")
            out[k] = v if type(v) in _SCALARS else _json_like(v, where)
        return FrozenDict(out)
    raise AttrValueError(f"{where}: expected strings, numbers, booleans, None, lists or dicts; got {describe(value)}")


class ListAttr(Attr):
    type_name = "list"

    def __init__(self, of: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.of = _element_attr(of, "attr.list(of=...)")
        self.has_labels = bool(self.of is not None and self.of.has_labels)
        self.requires_files = bool(self.of is not None and self.of.requires_files)

    def convert(self, value: Any, package: str) -> tuple[Any, ...]:
        if not _is_sequence(value):
            raise AttrValueError(f"expected a list, got {describe(value)}")
        if self.of is None:
            if _SCALARS.issuperset(map(type, value)):
                return tuple(value)
            return tuple([x if type(x) in _SCALARS else _json_like(x, "list element") for x in value])
        return tuple([_convert_item(self.of, item, package, "element", i) for i, item in enumerate(value)])

    def empty(self) -> tuple[Any, ...]:
        return ()

    def labels(self, value: Any) -> Iterable[Label]:
        if self.of is None or not self.of.has_labels:
            return ()
        return [label for item in value for label in self.of.labels(item)]


class DictAttr(Attr):
    type_name = "dict"

    def __init__(self, value: Any = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.value_attr = _element_attr(value, "attr.dict(value=...)")

    def convert(self, value: Any, package: str) -> FrozenDict:
        if not _is_mapping(value):
            raise AttrValueError(f"expected a dict, got {describe(value)}")
        if (
            self.value_attr is None
            and _STR.issuperset(map(type, value))
            and _SCALARS.issuperset(map(type, value.values()))
        ):
            return FrozenDict(value)  # string keys, plain values: nothing to convert
        out = {}
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                raise AttrValueError(f"dict keys must be strings, got {describe(k)}")
            if self.value_attr is None:
                out[k] = v if type(v) in _SCALARS else _json_like(v, f"value for key {k!r}")
            else:
                out[k] = _convert_item(self.value_attr, v, package, "value for key", k)
        return FrozenDict(out)

    def empty(self) -> FrozenDict:
        return FrozenDict()


@dataclasses.dataclass(frozen=True, slots=True)
class _DataclassInfo:
    names: tuple[str, ...]  # init fields, in declaration order
    known: frozenset[str]  # the same, for membership tests
    required: frozenset[str]  # init fields without a default
    nested: dict[str, type]  # fields whose type is itself a dataclass


@cache
def _dataclass_info(cls: type) -> _DataclassInfo:
    """A dataclass's init field names, the required ones, and the fields whose type is itself a dataclass."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = tuple(f.name for f in fields)
    required = frozenset(
        f.name for f in fields if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: no nested conversion
        hints = {}
    nested = {n: t for n, t in hints.items() if n in names and isinstance(t, type) and dataclasses.is_dataclass(t)}
    return _DataclassInfo(names, frozenset(names), required, nested)


def _build_dataclass(cls: type, value: Mapping[str, Any], where: str) -> Any:
    info = _dataclass_info(cls)
    keys = value.keys() if isinstance(value, dict) else frozenset(value)
    if not keys <= info.known:
        key = next(k for k in value if k not in info.known)
        raise AttrValueError(
            f"{where}: unknown field {key!r} for {cls.__name__} (fields: {', '.join(info.names) or 'none'})"
        )
    if not info.required <= keys:
        name = next(n for n in info.required if n not in value)
        raise AttrValueError(f"{where}: missing field {name!r} for {cls.__name__}")
    nested = info.nested
    if not nested and _SCALARS.issuperset(map(type, value.values())):
        kwargs: Mapping[str, Any] = value  # nothing to convert or copy
    else:
        kwargs = _dataclass_fields(value, nested, where)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise AttrValueError(f"{where}: {cls.__name__}(...) rejected the fields: {exc}") from None


def _dataclass_fields(value: Mapping[str, Any], nested: dict[str, type], where: str) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for key, item in value.items():
        if type(item) in _SCALARS:
            pass
        elif key in nested and _is_mapping(item):
            item = _build_dataclass(nested[key], item, f"{where}.{key}")
        else:
            item = thaw(item)
        kwargs[key] = item
    return kwargs


class ConfigAttr(Attr):
    """A dataclass config: given as a dict of its fields or as an instance."""

    type_name = "config"

    def __init__(self, cls: type, **kwargs: Any):
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            raise TypeError(f"attr.config(): expected a dataclass type, got {cls!r}")
        super().__init__(**kwargs)
        self.cls = cls

    def convert(self, value: Any, package: str) -> Any:
        if isinstance(value, self.cls):
            return value
        if _is_mapping(value):
            return _build_dataclass(self.cls, value, "config")
        raise AttrValueError(f"expected a dict of {self.cls.__name__} fields (or an instance), got {describe(value)}")


class attr:  # noqa: N801 - the Starlark-style namespace: attr.label(), attr.int(), ...
    """Attribute type constructors: each takes ``mandatory=False``, ``default=``, ``doc=""`` and ``versioned=True``."""

    label = LabelAttr
    label_list = LabelListAttr
    label_keyed_dict = LabelKeyedDictAttr
    checkpoint = CheckpointAttr
    string = StringAttr
    int = IntAttr
    float = FloatAttr
    bool = BoolAttr
    list = ListAttr
    dict = DictAttr
    config = ConfigAttr
    source_files = SourceFilesAttr
    file_list = SourceFilesAttr

    def __init__(self) -> None:
        raise TypeError("attr is a namespace: call attr.label(), attr.string(), ...")
