"""``cache stats [PATTERN]``: per target and per rule type, what the cache did over the recorded runs and what it
holds now. ``runs`` is the ``compute`` event data of each recorded run (``run/compute.py``'s ``account``: every
step the build reused or ran, with its hours; the CLI reads them from the workspace's event logs).

Per target, over its steps: hits (runs that reused a step) and misses (runs that ran it), the hit rate
hits / (hits + misses), the hours reused and spent (steps without a compute record: unknown); under the prefix
now, every version of its steps (``<prefix>/<name>-<hash>``), the bytes they hold, and the oldest and newest
(their status file's time). A rule type's row sums its targets'."""

from __future__ import annotations

import time
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.cache.commands import _columns
from marinbuild.cache.text import format_age, format_size
from marinbuild.run import compute
from marinbuild.store import other_versions
from marinbuild.store import status as st
from marinbuild.store.prefix_walk import Store


def cache_stats(session: Any, patterns: list[str], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """``{"prefix", "runs", "targets": [row...], "rules": [row...]}``; a row: ``name, hits, misses, hit_rate,
    reused, spent`` (``compute.totals``), ``versions, bytes, oldest, newest`` (seconds since the epoch)."""
    prefix = session.settings.prefix
    labels = pb.resolve_targets(session, patterns)
    seen: dict[str, dict[str, list[Any]]] = {}
    for run in runs:
        for name, step in (run.get("steps") or {}).items():
            seen.setdefault(name, {"reused": [], "ran": []})[step.get("how", "ran")].append(step.get("hours"))
    store = Store(prefix)
    targets: list[dict[str, Any]] = []
    rules: dict[str, dict[str, Any]] = {}
    for label in labels:
        names = list(dict.fromkeys(s.name for s in session.steps_of(label)))
        paths = [p for n in names for p in other_versions.sibling_paths(prefix, n)]
        row = {"name": str(label), "rule": session.loaded.targets[label].kind, "versions": len(paths)}
        row |= {
            "bytes": sum(store.usage(p)[0] for p in paths),
            "times": [store.mtime(st.status_path(p)) for p in paths],
        }
        row |= {how: [h for n in names for h in seen.get(n, {}).get(how, [])] for how in ("reused", "ran")}
        targets.append(row)
        empty = {"name": row["rule"], "versions": 0, "bytes": 0, "times": [], "reused": [], "ran": []}
        rule = rules.setdefault(row["rule"], empty)
        for key in ("versions", "bytes", "times", "reused", "ran"):
            rule[key] += row[key]
    return {
        "prefix": prefix,
        "runs": len(runs),
        "targets": list(map(_done, targets)),
        "rules": list(map(_done, rules.values())),
    }


def _done(row: dict[str, Any]) -> dict[str, Any]:
    reused, ran, times = row.pop("reused"), row.pop("ran"), [t for t in row.pop("times") if t is not None]
    rate = len(reused) / (len(reused) + len(ran)) if reused or ran else None
    row |= {"oldest": min(times, default=None), "newest": max(times, default=None), "hits": len(reused)}
    return row | {"misses": len(ran), "hit_rate": rate, "reused": compute.totals(reused), "spent": compute.totals(ran)}


def format_stats(stats: dict[str, Any]) -> str:
    now, text = time.time(), ""
    for what, rows in (("TARGET", stats["targets"]), ("RULE", stats["rules"])):
        table = [(what, "HITS", "RATE", "REUSED", "SPENT", "STORED", "VERSIONS", "OLDEST", "NEWEST")]
        for r in rows:
            rate = "-" if r["hit_rate"] is None else f"{r['hit_rate']:.0%}"
            cells = [
                f"{r['hits']}/{r['hits'] + r['misses']}",
                rate,
                compute.amount(r["reused"]),
                compute.amount(r["spent"]),
            ]
            ages = ["-" if r[k] is None else format_age(now - r[k]) + " ago" for k in ("oldest", "newest")]
            table.append((r["name"], *cells, format_size(r["bytes"]), str(r["versions"]), *ages))
        text += _columns(table) + "\n"
    runs = stats["runs"]
    return (
        text
        + f"over {runs} recorded run{'s' if runs != 1 else ''}: this workspace's build logs against {stats['prefix']}\n"
    )
