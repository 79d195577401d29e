"""Graph traversals for query functions, all iterative (chains 10k+ deep must not recurse).

Edges go from a target to each direct dependency (``u -> v``: u depends on v). Labels that are not nodes of the graph
are tolerated everywhere and have no edges."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping, Set

import networkx as nx


def _bfs(
    adj: Mapping[str, Mapping[str, object]], start: Iterable[str], depth: int | None, within: Set[str] | None
) -> set[str]:
    seen = set(start)
    frontier = list(seen)
    level = 0
    while frontier and (depth is None or level < depth):
        level += 1
        nxt: list[str] = []
        for node in frontier:
            for other in adj.get(node, ()):
                if other not in seen and (within is None or other in within):
                    seen.add(other)
                    nxt.append(other)
        frontier = nxt
    return seen


def forward_closure(graph: nx.DiGraph, start: Iterable[str], depth: int | None = None) -> set[str]:
    """``start`` and every target it depends on at most ``depth`` edges away (``None``: any)."""
    return _bfs(graph.succ, start, depth, None)


def backward_closure(
    graph: nx.DiGraph, start: Iterable[str], depth: int | None = None, within: Set[str] | None = None
) -> set[str]:
    """``start`` and every target depending on it at most ``depth`` edges away, staying inside ``within``."""
    return _bfs(graph.pred, start, depth, within)


def some_path(graph: nx.DiGraph, sources: Set[str], targets: Set[str]) -> list[str]:
    """A shortest path from ``sources`` to ``targets`` ([] if none); deterministic: explored in label order."""
    if not sources or not targets:
        return []
    parent: dict[str, str | None] = {}
    queue: deque[str] = deque()
    for source in sorted(sources):
        parent[source] = None
        queue.append(source)
    succ = graph.succ
    while queue:
        node = queue.popleft()
        if node in targets:
            path = [node]
            while (prev := parent[path[-1]]) is not None:
                path.append(prev)
            path.reverse()
            return path
        for other in sorted(succ.get(node, ())):
            if other not in parent:
                parent[other] = node
                queue.append(other)
    return []


def topological_rank(graph: nx.DiGraph) -> dict[str, int]:
    """Each node's rank in a dependencies-first order, ties by label (Kahn's; cycles: smallest label next)."""
    remaining = {node: len(graph.succ[node]) for node in graph}
    ready = [node for node, count in remaining.items() if count == 0]
    heapq.heapify(ready)
    by_label = sorted(remaining)
    cursor = 0
    rank: dict[str, int] = {}
    pred = graph.pred
    while len(rank) < len(remaining):
        if ready:
            node = heapq.heappop(ready)
            if node in rank:
                continue
        else:  # a cycle: nothing is ready
            while by_label[cursor] in rank:
                cursor += 1
            node = by_label[cursor]
        rank[node] = len(rank)
        for dependent in pred[node]:
            remaining[dependent] -= 1
            if remaining[dependent] == 0 and dependent not in rank:
                heapq.heappush(ready, dependent)
    return rank
