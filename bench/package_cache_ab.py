"""The package cache with and without: the CLI's incremental build, alternating two checkouts of marinbuild.

``python bench/package_cache_ab.py DIR --rounds 6 --without OTHER_CHECKOUT`` takes a layered workload
written by ``workloads.py`` into DIR (its ``ws/`` built once into ``DIR/prefix``), and, round by round,
gives the mid node a new salt (as ``run.py``'s incremental phase does) and runs ``python -m marinbuild
//...`` with ``PYTHONPATH`` at this checkout, then again at ``OTHER_CHECKOUT`` (a checkout without the
mechanism, e.g. ``git worktree add /tmp/base <commit>``). It prints each run and the medians of CPU
seconds (user + system, from ``wait4``), wall seconds and the largest peak RSS; a machine shared with
other work disturbs CPU seconds less than wall time, so compare those, in the same run.

With one workload both checkouts take the full path: each finds the other's code recorded for the rule
module (the checkouts lie at different paths), so neither keeps a snapshot. ``--without-dir OTHER_DIR``
gives the other checkout a workload of its own (built once by it, the same graph): each then builds from
its own snapshot and rows, as a user's edit does, which is what a mechanism of that path needs. An edit
this recent (``snapshot.RACY_NS``) is not trusted to stay as the build saw it, so that build records no
snapshot and the next one starts from older rows; ``--settle`` dates each edit a few seconds back, as if the
build ran that long after it was saved, so that every build records its rows for the next.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workloads import Graph, set_build_salt  # noqa: E402

HERE = str(Path(__file__).resolve().parent.parent)
SETTLED = 5.0
"""Seconds ``--settle`` dates an edit back: past the window in which a build does not trust a changed input."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a workload folder of workloads.py (its ws/ built into DIR/prefix)")
    parser.add_argument("--without", required=True, help="a checkout of marinbuild without the mechanism")
    parser.add_argument("--without-dir", type=Path, help="a workload folder of its own for the other checkout")
    parser.add_argument("--settle", action="store_true", help="date each edit a few seconds back (see above)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--salt", type=int, default=int(time.time()) % 100_000 * 100)
    opts = parser.parse_args()
    data = json.loads((opts.dir / "graph.json").read_text())
    graph = Graph(data["shape"], tuple(tuple(d) for d in data["deps"]), data["mid"])
    folders = {"with": opts.dir, "without": opts.without_dir or opts.dir}
    versions = {"with": HERE, "without": str(Path(opts.without).resolve())}
    samples: dict[str, list[tuple[float, float, int]]] = {name: [] for name in versions}
    salt = opts.salt
    for _ in range(opts.rounds):
        for name, path in versions.items():
            salt += 1
            ws, prefix = folders[name] / "ws", folders[name] / "prefix"
            edited = set_build_salt(ws, graph, graph.mid, salt)
            if opts.settle:
                when = time.time() - SETTLED
                os.utime(edited, (when, when))
            env = dict(os.environ, PYTHONPATH=path)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env.pop("MARIN_PREFIX", None)
            start = time.perf_counter()
            child = subprocess.Popen(
                [sys.executable, "-m", "marinbuild", "//...", "--prefix", str(prefix)],
                cwd=ws,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - start
            if status != 0:
                raise SystemExit(f"{name}: the build failed (status {status})")
            sample = (usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss // 1024)
            samples[name].append(sample)
            print(f"{name:8s} cpu {sample[0]:6.2f} s  wall {sample[1]:6.2f} s  peak RSS {sample[2]} MB", flush=True)
    print(f"medians of {opts.rounds} rounds (load average {os.getloadavg()[0]:.1f}):")
    for name, rows in samples.items():
        cpu = statistics.median(r[0] for r in rows)
        wall = statistics.median(r[1] for r in rows)
        print(f"{name:8s} cpu {cpu:6.2f} s  wall {wall:6.2f} s  peak RSS {max(r[2] for r in rows)} MB")


if __name__ == "__main__":
    main()
