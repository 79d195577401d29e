"""``QueryUniverse``: what a query runs against (the target graph, cache states, pattern expansion); the caller
builds it (loading packages, reading the cache), this package only reads it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from marinbuild.query.graphops import topological_rank


@dataclass(eq=False)
class QueryUniverse:
    """The targets a query sees; a snapshot: do not mutate ``graph`` after the first query on it.

    ``graph``: nodes are labels, ``u -> v`` when u directly depends on v; node attributes ``kind``, ``attrs`` and
    optionally ``labels`` (attribute -> the labels it names; without it ``labels()`` looks for label strings).
    ``state_of(label)`` gives one of ``STATES``, at most once per label per evaluation; ``expand_pattern(word)`` a
    pattern's labels (raising the caller's error for unknown ones); ``location_of(label)`` the declaring call's
    ``path:line:col``; ``states_of(labels)`` just these labels' states."""

    graph: nx.DiGraph
    state_of: Callable[[str], str]
    expand_pattern: Callable[[str], list[str]]
    location_of: Callable[[str], str] | None = None
    states_of: Callable[[list[str]], dict[str, str]] | None = None
    _rank: dict[str, int] | None = field(default=None, init=False, repr=False)

    def kind_of(self, label: str) -> str:
        data = self.graph.nodes.get(label)
        return str(data.get("kind") or "unknown") if data is not None else "unknown"

    def attrs_of(self, label: str) -> Mapping[str, Any]:
        data = self.graph.nodes.get(label)
        return (data.get("attrs") or {}) if data is not None else {}

    def labels_in(self, label: str, attr: str) -> list[str] | None:
        """The labels attribute ``attr`` of ``label`` names, when the graph records them; else None."""
        data = self.graph.nodes.get(label)
        recorded = data.get("labels") if data is not None else None
        return None if recorded is None else list(recorded.get(attr, ()))

    def deps_of(self, label: str) -> list[str]:
        return sorted(self.graph.succ[label]) if label in self.graph else []

    def order(self, labels: Iterable[str]) -> list[str]:
        """``labels`` sorted dependencies first (topologically), ties by label; labels outside the graph last."""
        if self._rank is None:
            self._rank = topological_rank(self.graph)
        rank = self._rank
        return sorted(set(labels), key=lambda label: (rank.get(label, len(rank)), label))
