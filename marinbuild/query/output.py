"""Output formatters for query results: ``label``, ``label_kind``, ``location``, ``json`` and ``graph`` (DOT)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from marinbuild.query.errors import QueryError, did_you_mean
from marinbuild.query.universe import QueryUniverse
from marinbuild.query.values import json_safe

OUTPUT_FORMATS = ("label", "label_kind", "location", "json", "graph")

STATE_COLORS = {
    "built": "palegreen",
    "stale": "khaki",
    "missing": "lightgray",
    "failed": "lightcoral",
    "running": "lightskyblue",
}
"""The fill colour of each cache state in ``--output graph``."""


def check_output(output: str) -> None:
    """Raise ``QueryError`` naming the valid formats unless ``output`` is one (call before evaluating)."""
    if output not in OUTPUT_FORMATS:
        hint = did_you_mean(output, OUTPUT_FORMATS)
        raise QueryError(f"unknown output format {output!r}{hint}; valid formats: {', '.join(OUTPUT_FORMATS)}")


def format_result(labels: Sequence[str], universe: QueryUniverse, output: str = "label") -> str:
    """``labels`` in format ``output`` (``json``, Bazel's DOT ``graph`` coloured by cache state), newline-terminated."""
    check_output(output)
    if output == "label":
        return "".join(f"{label}\n" for label in labels)
    if output == "label_kind":
        return "".join(f"{universe.kind_of(label)} rule {label}\n" for label in labels)
    if output == "location":
        where = universe.location_of or (lambda label: "(unknown location)")
        return "".join(f"{where(label)}: {universe.kind_of(label)} rule {label}\n" for label in labels)
    if output == "json":
        doc = [
            {
                "label": label,
                "kind": universe.kind_of(label),
                "deps": universe.deps_of(label),
                "attrs": {str(k): json_safe(v) for k, v in sorted(universe.attrs_of(label).items(), key=_key)},
            }
            for label in labels
        ]
        return json.dumps(doc, indent=2) + "\n"
    members = set(labels)
    legend = ", ".join(f"{state}: {color}" for state, color in STATE_COLORS.items())
    lines = ["digraph mygraph {", f"  // fill colour = cache state ({legend})", "  node [shape=box, style=filled];"]
    states = (
        universe.states_of(list(labels))
        if universe.states_of is not None
        else {label: universe.state_of(label) for label in labels}
    )
    for label in labels:
        lines.append(f"  {_dot(label)} [fillcolor={STATE_COLORS.get(states[label], 'white')}]")
        lines.extend(f"  {_dot(label)} -> {_dot(dep)}" for dep in universe.deps_of(label) if dep in members)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _key(item: tuple[object, object]) -> str:
    return str(item[0])


def _dot(label: str) -> str:
    return '"' + label.replace("\\", "\\\\").replace('"', '\\"') + '"'
