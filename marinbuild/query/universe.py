"""``QueryUniverse``: what a query runs against — the target graph, cache states, pattern expansion.

The caller builds it (loading packages, reading the cache); this package only reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from marinbuild.query.graphops import topological_rank

__all__ = ["STATES", "QueryUniverse"]

STATES = ("built", "stale", "missing", "failed", "running")


@dataclass(eq=False)
class QueryUniverse:
    """The targets a query sees.

    ``graph``: nodes are labels (``"//pkg:name"``), an edge ``u -> v`` means u directly
    depends on v; node attributes ``kind`` (rule name, e.g. ``"python_step"``), ``attrs``
    (attribute name -> value) and, optionally, ``labels`` (attribute name -> the labels it
    names, for attributes whose type holds labels; without it ``labels()`` looks for label
    strings in the values). ``state_of(label)`` returns one of ``STATES``; it is called
    lazily, at most once per label per evaluation, and only for labels that reach a
    cache-aware function. ``expand_pattern(word)`` turns a target pattern (``//pkg/...``,
    ``//pkg:all``, ``:name``...) into labels and raises the caller's own error for unknown
    ones; it is called once per distinct word per evaluation. ``location_of(label)``, when given,
    is where the target was declared.

    The universe is a snapshot: do not mutate ``graph`` after the first query on it.
    """

    graph: nx.DiGraph
    state_of: Callable[[str], str]
    expand_pattern: Callable[[str], list[str]]
    location_of: Callable[[str], str] | None = None
    """``path:line:col`` of the rule call that declared a label (``--output location``)."""
    states_of: Callable[[list[str]], dict[str, str]] | None = None
    """The states of just these labels (``--output graph``), without analysing the rest; else ``state_of``."""
    _rank: dict[str, int] | None = field(default=None, init=False, repr=False)

    def kind_of(self, label: str) -> str:
        """The rule kind of ``label`` (``"unknown"`` when the graph does not say)."""
        data = self.graph.nodes.get(label)
        return str(data.get("kind") or "unknown") if data is not None else "unknown"

    def attrs_of(self, label: str) -> Mapping[str, Any]:
        """The attributes of ``label`` (empty when it has none or is not in the graph)."""
        data = self.graph.nodes.get(label)
        return (data.get("attrs") or {}) if data is not None else {}

    def labels_in(self, label: str, attr: str) -> list[str] | None:
        """The labels attribute ``attr`` of ``label`` names, when the graph records them (node data
        ``labels``: attribute name -> labels, for attributes whose type holds labels); else None."""
        data = self.graph.nodes.get(label)
        recorded = data.get("labels") if data is not None else None
        if recorded is None:
            return None
        return list(recorded.get(attr, ()))

    def deps_of(self, label: str) -> list[str]:
        """The direct dependencies of ``label``, sorted by label."""
        return sorted(self.graph.succ[label]) if label in self.graph else []

    def order(self, labels: Iterable[str]) -> list[str]:
        """``labels`` sorted dependencies first (topologically), ties by label; labels outside the graph last."""
        if self._rank is None:
            self._rank = topological_rank(self.graph)
        rank = self._rank
        missing = len(rank)
        return sorted(set(labels), key=lambda label: (rank.get(label, missing), label))
