"""The query universe of a session: its loaded targets as a graph, and cache states on demand.

Cache-aware query functions (``built(x)``, ``stale(x)``...) need versions, so the targets are analysed into steps the
first time one of them asks; plain graph queries never do."""

from __future__ import annotations

from typing import Any

import networkx as nx

from marinbuild.cache import cache_status
from marinbuild.core.labels import Label, parse_label
from marinbuild.query import STATES, QueryUniverse


def target_graph(loaded: Any) -> nx.DiGraph:
    """The target graph (edges to direct dependencies); node data ``kind``, ``attrs`` and ``labels`` (per attribute)."""
    graph = nx.DiGraph()
    for label, target in loaded.targets.items():
        specs, files = target.rule.attrs, set(target.srcs)  # source files are not nodes of the graph
        refs = {
            name: [str(x) for x in specs[name].labels(target.attrs[name]) if x not in files]
            if target.attrs[name] is not None
            else []
            for name in target.rule.label_attrs
        }
        graph.add_node(str(label), kind=target.kind, attrs=_plain(target.attrs), labels=refs)
    for label, target in loaded.targets.items():
        for dep in target.deps:
            graph.add_edge(str(label), str(dep))
    return graph


def _plain(value: Any) -> Any:
    """A thawed copy of an attribute value with every ``Label`` as its string."""
    if isinstance(value, Label):
        return str(value)
    if isinstance(value, list):
        return [_plain(x) for x in value]
    if type(value) is tuple:
        return tuple(_plain(x) for x in value)
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def universe_for(session: Any) -> QueryUniverse:
    loaded = session.loaded
    states: dict[str, str] = {}

    def analysed_states(labels: list[Label]) -> dict[str, str]:
        session.analyse(labels)
        return {str(row.label): row.state if row.state in STATES else "failed" for row in cache_status(session, labels)}

    def state_of(label: str) -> str:
        if not states:
            states.update(analysed_states(list(loaded.targets)))
        return states[label]

    def expand(word: str) -> list[str]:
        return [str(label) for label in loaded.expand([word], session.current_package())]

    def states_of(wanted: list[str]) -> dict[str, str]:
        if states:
            return {label: states[label] for label in wanted}
        return analysed_states([parse_label(label) for label in wanted])

    def location_of(label: str) -> str:
        return str(loaded.targets[parse_label(label)].location)

    return QueryUniverse(
        graph=target_graph(loaded),
        state_of=state_of,
        expand_pattern=expand,
        location_of=location_of,
        states_of=states_of,
    )
