"""Labels and target patterns: parsing, printing and expansion (pure: no I/O).

A label names a target or source file (``//pkg:name``, ``@marinbuild//rules:python.py``; ``:name`` and ``name`` relative
to a current package); a pattern selects labels (``//pkg/...``, ``//pkg:all``, ``//...``, a label, ``-PATTERN`` to
subtract). Names may contain ``/`` but never ``.`` or ``..`` segments, a leading ``/`` or backslashes, so
``package/name`` stays inside whatever prefix it is joined to."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

_PACKAGE_SEGMENT = re.compile(r"[A-Za-z0-9_.+=,~-]+\Z")
_NAME_SEGMENT = re.compile(r"[A-Za-z0-9_.+=,~@#%-]+\Z")
_REPO = re.compile(r"[A-Za-z0-9_.-]+\Z")


class LabelError(ValueError):
    """A label or target pattern is malformed."""


class PatternError(LabelError):
    """A target pattern names a package or target that does not exist."""


@dataclass(frozen=True, order=True, slots=True)
class Label:
    """A target or source-file name: ``[@repo]//package:name`` (``""``: the workspace root, the main workspace)."""

    package: str
    name: str
    repo: str = ""

    def __str__(self) -> str:
        prefix = f"@{self.repo}" if self.repo else ""
        return f"{prefix}//{self.package}:{self.name}"

    def __repr__(self) -> str:
        return f"Label({str(self)!r})"

    @property
    def path(self) -> str:
        return f"{self.package}/{self.name}" if self.package else self.name


def validate_package(package: str, text: str | None = None) -> None:
    """Raise ``LabelError`` unless ``package`` is a valid package path (``""`` is the root)."""
    if package and (problem := _path_problem(package, "package", _PACKAGE_SEGMENT)):
        raise LabelError(f"invalid label {package if text is None else text!r}: {problem}")


def validate_target_name(name: str, text: str | None = None) -> None:
    """Raise ``LabelError`` unless ``name`` is a valid target or file name (see the module docstring)."""
    problem = "empty target name" if name == "" else _path_problem(name, "target name", _NAME_SEGMENT)
    if problem:
        raise LabelError(f"invalid label {name if text is None else text!r}: {problem}")


def _path_problem(path: str, what: str, segment_pattern: re.Pattern[str]) -> str | None:
    """What is wrong with ``path``: it must be ``/``-separated segments matching ``segment_pattern``, none empty,
    ``.`` or ``..``."""
    if "\\" in path:
        return "backslashes are not allowed; use '/'"
    if path.startswith("/") or path.endswith("/"):
        return f"{what} must not {'start' if path.startswith('/') else 'end'} with '/'"
    for segment in path.split("/"):
        if segment == "":
            return f"{what} has an empty segment ('//')"
        if segment in (".", ".."):
            return f"{what} segments must not be '.' or '..' (a label may not escape its package)"
        if not segment_pattern.match(segment):
            bad = next(ch for ch in segment if not segment_pattern.match(ch))
            return f"illegal character {bad!r} in {what} {path!r}"
    return None


def parse_label(text: str, current_package: str | None = None) -> Label:
    """``//pkg/sub:name``, ``//pkg`` (``//pkg:pkg``), ``@repo//pkg:name``; ``:name``, ``name`` in a package."""
    if not isinstance(text, str):
        raise LabelError(f"expected a label string, got {type(text).__name__} {text!r}")
    if text == "":
        raise LabelError("invalid label '': empty label")
    if text != text.strip():
        raise LabelError(f"invalid label {text!r}: leading or trailing whitespace")
    if "\\" in text:
        raise LabelError(f"invalid label {text!r}: backslashes are not allowed; use '/'")
    repo = ""
    rest = text
    if rest.startswith("@"):
        sep = rest.find("//")
        if sep < 0:
            raise LabelError(f"invalid label {text!r}: a repository label looks like '@repo//pkg:name'")
        repo = rest[1:sep]
        if not _REPO.match(repo):
            raise LabelError(f"invalid label {text!r}: invalid repository name {repo!r}")
        rest = rest[sep:]
    if rest.startswith("//"):
        body = rest[2:]
        if body.count(":") > 1:
            raise LabelError(f"invalid label {text!r}: more than one ':'")
        if ":" in body:
            package, name = body.split(":", 1)
        else:
            package = body
            if package == "":
                raise LabelError(f"invalid label {text!r}: missing package or target name")
            if package.endswith("/"):
                raise LabelError(f"invalid label {text!r}: package must not end with '/'")
            name = package.rsplit("/", 1)[-1]
        validate_package(package, text)
        validate_target_name(name, text)
        return Label(package, name, repo)
    if repo:
        raise LabelError(f"invalid label {text!r}: a repository label looks like '@repo//pkg:name'")
    if rest.startswith("/"):
        raise LabelError(f"invalid label {text!r}: absolute paths are not labels; write '//package:name'")
    if current_package is None:
        raise LabelError(f"invalid label {text!r}: relative label needs a current package; write '//package:name'")
    name = rest[1:] if rest.startswith(":") else rest
    if ":" in name:
        raise LabelError(f"invalid label {text!r}: misplaced ':' (write '//package:name' or ':name')")
    validate_target_name(name, text)
    return Label(current_package, name)


@dataclass(frozen=True, slots=True)
class TargetPattern:
    """A parsed pattern: ``kind`` ``"label"``, ``"all"`` (``package``'s targets) or ``"recursive"`` (and below)."""

    kind: str
    package: str
    label: Label | None = None
    negative: bool = False
    text: str = ""

    def __str__(self) -> str:
        return self.text

    def matches_package(self, package: str) -> bool:
        if self.kind == "recursive":
            return self.package == "" or package == self.package or package.startswith(self.package + "/")
        return package == self.package


def parse_pattern(text: str, current_package: str = "") -> TargetPattern:
    """Parse a target pattern such as ``//pkg/...``, ``//pkg:all``, ``-//pkg:x`` or ``:x``."""
    if not isinstance(text, str) or text.strip() == "":
        raise LabelError(f"invalid target pattern {text!r}: empty pattern")
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if body.strip() == "":
        raise LabelError(f"invalid target pattern {text!r}: empty pattern after '-'")
    if body.startswith("@"):
        raise LabelError(f"invalid target pattern {text!r}: patterns over other repositories are not supported")
    if not body.startswith("//") and not body.startswith(":"):
        if body.startswith("/"):
            raise LabelError(f"invalid target pattern {text!r}: absolute paths are not patterns; write '//package'")
        # relative to the current package: 'sub/...', 'sub:x', '...'
        body = "//" + (f"{current_package}/{body}" if current_package else body)
    elif body.startswith(":"):
        body = f"//{current_package}{body}"
    inner = body[2:]
    if inner == "..." or inner.endswith("/..."):
        package = inner[: -len("...")].rstrip("/")
        if ":" in package:
            raise LabelError(f"invalid target pattern {text!r}: '...' must follow a package ('//pkg/...')")
        validate_package(package, text)
        return TargetPattern("recursive", package, None, negative, text)
    if ":" in inner:
        package, name = inner.split(":", 1)
        if name in ("all", "*", "all-targets"):
            validate_package(package, text)
            return TargetPattern("all", package, None, negative, text)
        if name.endswith("/...") or name == "...":
            raise LabelError(f"invalid target pattern {text!r}: '...' belongs to the package part ('//pkg/...')")
    try:
        label = parse_label(body)
    except LabelError as exc:
        raise LabelError(f"invalid target pattern {text!r}: {exc}") from None
    return TargetPattern("label", label.package, label, negative, text)


def expand_patterns(
    patterns: Iterable[str | TargetPattern],
    all_labels_by_package: Mapping[str, Sequence[str | Label]],
    current_package: str = "",
) -> list[Label]:
    """Expand target patterns, in order, against each package's target names (or labels) in declaration order.
    Positive patterns add labels (packages sorted, first occurrence wins); ``-PATTERN`` removes those it matches
    from the ones selected so far. A label or ``:all`` naming a package or target that does not exist, and a
    positive ``//pkg/...`` with no package beneath ``pkg``, raise ``PatternError`` naming it."""
    names_by_package: dict[str, list[str]] = {
        pkg: [x.name if isinstance(x, Label) else x for x in targets] for pkg, targets in all_labels_by_package.items()
    }
    sorted_packages = sorted(names_by_package)
    selected: dict[Label, None] = {}
    for raw in patterns:
        pattern = raw if isinstance(raw, TargetPattern) else parse_pattern(raw, current_package)
        matched = _match(pattern, names_by_package, sorted_packages)
        if pattern.negative:
            for label in matched:
                selected.pop(label, None)
        else:
            for label in matched:
                selected.setdefault(label, None)
    return list(selected)


def _match(pattern: TargetPattern, names_by_package: dict[str, list[str]], sorted_packages: list[str]) -> list[Label]:
    if pattern.kind == "label":
        assert pattern.label is not None
        _require_package(pattern, names_by_package)
        names = names_by_package[pattern.package]
        if pattern.label.name not in names:
            hint = _did_you_mean(pattern.label.name, names)
            raise PatternError(
                f"no such target '{pattern.label}' (pattern {pattern.text!r}): "
                f"package '{pattern.package}' has no target named {pattern.label.name!r}{hint}"
            )
        return [pattern.label]
    if pattern.kind == "all":
        _require_package(pattern, names_by_package)
        return [Label(pattern.package, name) for name in names_by_package[pattern.package]]
    packages = [p for p in sorted_packages if pattern.matches_package(p)]
    if not packages and pattern.package != "" and not pattern.negative:
        raise PatternError(f"no packages beneath '//{pattern.package}' (pattern {pattern.text!r})")
    return [Label(p, name) for p in packages for name in names_by_package[p]]


def _require_package(pattern: TargetPattern, names_by_package: dict[str, list[str]]) -> None:
    if pattern.package not in names_by_package:
        hint = _did_you_mean(pattern.package, list(names_by_package))
        raise PatternError(
            f"no such package '{pattern.package}' (pattern {pattern.text!r}): it has no BUILD.marin file{hint}"
        )


def _did_you_mean(word: str, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
