"""``cache stats [PATTERN]``: per target and per rule type, what the cache did over the recorded runs and what it
holds now. ``runs`` is the ``compute`` event data of each recorded run (``run/compute.py``'s ``account``: every
step the build reused or ran, with its hours; the CLI reads them from the workspace's event logs).

Per target, over its steps: hits (runs that reused a step) and misses (runs that ran it), the hit rate
hits / (hits + misses), the hours reused and spent (steps without a compute record: unknown); under the prefix
now, every version of its steps (``<prefix>/<name>-<hash>``), the bytes they hold, and the oldest and newest
(their status file's time). A rule type's row sums its targets'.
"""

from __future__ import annotations

import time
from typing import Any

from marinbuild.cache import probe as pb
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
        times = [t for t in map(store.mtime, map(st.status_path, paths)) if t is not None]
        row = {
            "name": str(label),
            "rule": session.loaded.targets[label].kind,
            "reused": [h for n in names for h in seen.get(n, {}).get("reused", [])],
            "ran": [h for n in names for h in seen.get(n, {}).get("ran", [])],
            "versions": len(paths),
            "bytes": sum(store.usage(p)[0] for p in paths),
            "oldest": min(times, default=None),
            "newest": max(times, default=None),
        }
        targets.append(row)
        rule = rules.setdefault(row["rule"], {"name": row["rule"], "reused": [], "ran": [], "versions": 0, "bytes": 0})
        for key in ("reused", "ran", "versions", "bytes"):
            rule[key] += row[key]
        for key, pick in (("oldest", min), ("newest", max)):
            rule[key] = pick((t for t in (rule.get(key), row[key]) if t is not None), default=None)
    return {
        "prefix": prefix,
        "runs": len(runs),
        "targets": [_done(r) for r in targets],
        "rules": list(map(_done, rules.values())),
    }


def _done(row: dict[str, Any]) -> dict[str, Any]:
    reused, ran = row.pop("reused"), row.pop("ran")
    rate = len(reused) / (len(reused) + len(ran)) if reused or ran else None
    hours = {"reused": compute.totals(reused), "spent": compute.totals(ran)}
    return {**row, "hits": len(reused), "misses": len(ran), "hit_rate": rate, **hours}


def format_stats(stats: dict[str, Any]) -> str:
    now = time.time()
    lines = []
    for what, rows in (("TARGET", stats["targets"]), ("RULE", stats["rules"])):
        table = [(what, "HITS", "RATE", "REUSED", "SPENT", "STORED", "VERSIONS", "OLDEST", "NEWEST")]
        for r in rows:
            rate = f"{r['hit_rate']:.0%}" if r["hit_rate"] is not None else "-"
            ages = [format_age(now - r[k]) + " ago" if r[k] is not None else "-" for k in ("oldest", "newest")]
            amounts = [compute.amount(r[k]) for k in ("reused", "spent")]
            table.append(
                (
                    r["name"],
                    f"{r['hits']}/{r['hits'] + r['misses']}",
                    rate,
                    *amounts,
                    format_size(r["bytes"]),
                    str(r["versions"]),
                    *ages,
                )
            )
        widths = [max(len(t[i]) for t in table) for i in range(len(table[0]))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(t, widths, strict=True)).rstrip() for t in table] + [""]
    runs = stats["runs"]
    lines.append(
        f"over {runs} recorded run{'s' if runs != 1 else ''}: this workspace's build logs against {stats['prefix']}"
    )
    return "\n".join(lines) + "\n"
