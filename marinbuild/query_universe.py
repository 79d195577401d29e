"""The query universe of a session: its loaded targets as a graph, and cache states on demand.

Cache-aware query functions (``built(x)``, ``stale(x)``...) need versions, so the targets
are analysed into steps the first time one of them asks; plain graph queries never do.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from marinbuild.query import QueryUniverse


def target_graph(loaded: Any) -> nx.DiGraph:
    """Labels as nodes (with kind and attributes), an edge from each target to each direct dependency."""
    graph = nx.DiGraph()
    for label, target in loaded.targets.items():
        graph.add_node(str(label), kind=target.kind, attrs=_printable(target.attrs))
    for label, target in loaded.targets.items():
        for dep in target.deps:
            graph.add_edge(str(label), str(dep))
    return graph


def _printable(attrs: dict[str, Any]) -> dict[str, Any]:
    from marinbuild.load.frozen import thaw

    return {k: thaw(v) for k, v in attrs.items()}


def universe_for(session: Any) -> QueryUniverse:
    loaded = session.loaded
    states: dict[str, str] = {}

    def state_of(label: str) -> str:
        if not states:
            from marinbuild.cache import cache_status

            labels = list(loaded.targets)
            session.analyse(labels)
            for row in cache_status(session, labels):
                states[str(row.label)] = row.state if row.state in ("built", "stale", "missing", "failed",
                                                                     "running") else "failed"
        return states[label]

    def expand(word: str) -> list[str]:
        return [str(label) for label in loaded.expand([word], session.current_package())]

    return QueryUniverse(graph=target_graph(loaded), state_of=state_of, expand_pattern=expand)
