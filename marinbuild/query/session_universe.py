"""The query universes: a session's loaded targets as a graph, with cache states on demand; or the outputs
recorded under a prefix (``query --outputs``).

Cache-aware query functions (``built(x)``, ``stale(x)``...) need versions, so the targets are analysed into steps the
first time one of them asks; plain graph queries never do. The outputs universe is lineage (``cache/lineage.py``):
outputs named by their path under the prefix, an edge to each output a step read, every version, Marin's too."""

from __future__ import annotations

from typing import Any

import networkx as nx

from marinbuild.cache.commands import cache_status
from marinbuild.cache.lineage import recorded_outputs
from marinbuild.core.labels import Label, parse_label
from marinbuild.query import STATES, QueryUniverse
from marinbuild.store import status as st
from marinbuild.store.prefix_walk import normalize


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


def outputs_universe(prefix: str) -> QueryUniverse:
    """The outputs recorded under ``prefix`` (module docstring). A pattern is ``//...`` (every output), a label
    (every version its target made) or a path under the prefix, ``*`` matching within a path."""
    import fnmatch

    root = normalize(prefix).rstrip("/") + "/"
    outputs = recorded_outputs(prefix)
    name_of = {key: key[len(root) :] if key.startswith(root) else key for key in outputs}
    graph = nx.DiGraph()
    for key, output in outputs.items():
        attrs = {"label": output.label, "name": output.name, "runs": output.runs}
        graph.add_node(name_of[key], kind=output.rule or "script_step", attrs=attrs)
    for key, output in outputs.items():
        for used in output.inputs:
            graph.add_edge(name_of[key], name_of.get(used, used[len(root) :] if used.startswith(root) else used))

    def expand(word: str) -> list[str]:
        if word == "//...":
            return sorted(name_of.values())
        if word.startswith("//"):
            return sorted(name_of[k] for k, o in outputs.items() if o.label == word)
        return sorted(n for n in name_of.values() if fnmatch.fnmatchcase(n, word.strip("/")))

    def state_of(name: str) -> str:
        status = st.read_status(root + name)
        if status == st.STATUS_SUCCESS:
            return "built"
        return "failed" if status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED) else "running" if status else "missing"

    return QueryUniverse(graph=graph, state_of=state_of, expand_pattern=expand)
