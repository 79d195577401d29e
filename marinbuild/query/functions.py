"""The query function table: each function's parameters, their kinds, and its usage line.

The parser checks calls against this table (argument count and kinds, depth and regex validity) so that evaluation never
meets a malformed call; the evaluator implements them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Arg(Enum):
    EXPR = "expression"
    WORD = "word"
    REGEX = "regular expression"
    INT = "non-negative integer"
    POSITIVE = "positive integer"


@dataclass(frozen=True)
class FunctionSpec:
    """A query function: ``params`` are (name, kind) pairs; the first ``required`` are mandatory."""

    name: str
    params: tuple[tuple[str, Arg], ...]
    required: int
    summary: str

    @property
    def usage(self) -> str:
        head = ", ".join(p for p, _ in self.params[: self.required])
        tail = "".join(f"[, {p}]" for p, _ in self.params[self.required :])
        return f"{self.name}({head}{tail})"

    def arity(self) -> str:
        lo, hi = self.required, len(self.params)
        if lo == hi:
            return str(lo)
        return f"{lo} or {hi}" if hi == lo + 1 else f"{lo} to {hi}"


# Cache-aware functions (and the states ``state_of`` returns): each keeps the targets in its state.
CACHE_STATES = ("built", "stale", "missing", "failed", "running")

_X = ("expr", Arg.EXPR)
_SPECS = [
    FunctionSpec("deps", (_X, ("depth", Arg.INT)), 1, "expr and everything it depends on, up to depth edges away"),
    FunctionSpec(
        "rdeps",
        (("universe", Arg.EXPR), _X, ("depth", Arg.INT)),
        2,
        "targets in deps(universe) that depend on expr, up to depth edges away",
    ),
    FunctionSpec("somepath", (("from", Arg.EXPR), ("to", Arg.EXPR)), 2, "the targets on one path from 'from' to 'to'"),
    FunctionSpec("allpaths", (("from", Arg.EXPR), ("to", Arg.EXPR)), 2, "the targets on all paths from 'from' to 'to'"),
    FunctionSpec("kind", (("regex", Arg.REGEX), _X), 2, "targets whose '<kind> rule' matches regex"),
    FunctionSpec("attr", (("name", Arg.WORD), ("regex", Arg.REGEX), _X), 3, "targets whose attribute matches regex"),
    FunctionSpec("filter", (("regex", Arg.REGEX), _X), 2, "targets whose label matches regex"),
    FunctionSpec("labels", (("attr_name", Arg.WORD), _X), 2, "the targets named in an attribute"),
    FunctionSpec("some", (_X, ("count", Arg.POSITIVE)), 1, "count targets of expr (default 1); error if empty"),
] + [FunctionSpec(state, (_X,), 1, f"targets of expr whose cached state is {state!r}") for state in CACHE_STATES]

FUNCTIONS: dict[str, FunctionSpec] = {spec.name: spec for spec in _SPECS}

# Bazel query functions marinbuild does not offer (they concern files, tests and visibility).
BAZEL_ONLY = frozenset(
    {"tests", "siblings", "buildfiles", "rbuildfiles", "loadfiles", "visible", "same_pkg_direct_rdeps"}
)
