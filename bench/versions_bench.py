"""The speed mechanisms of ``marinbuild/core/versions.py`` against their plain forms, on the layered workload.

The project's complexity rule: a speed mechanism stays only if a row here shows a gain a user would notice.
Each row computes the same result both ways, in one process, on the versions of the layered graph of
``bench/engine_bench.py`` (10 layers, each step depending on 3 of the layer below):

- ``.executor_info`` texts: every step's indented version as a cold build writes it (``indented_version``,
  which refers to each dependency's already-indented text at its indentation) against ``json.dumps(version,
  indent=2)`` of each nested version (marinbuild's equivalent ``dumps_indented``). The two texts are compared.
- ``version_strs``: decoded on read (a no-op build reads none) against every version string decoded: the
  memory the decoded strings take.
- long version strings kept as pieces (``VersionTable.version_pieces``: references to their dependencies'
  pieces) against every version string joined: the memory the joined strings would take.

Times are CPU seconds of this process. Run: ``.venv/bin/python bench/versions_bench.py [--sizes 10000]
[--doc docs/performance.md]`` (``--doc`` writes the table between the ``<!-- versions_bench -->`` markers).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)
from engine_bench import build_steps  # noqa: E402

MARKER = "versions_bench"


def measure(n: int) -> list[list[str]]:
    from marinbuild.core.jsonenc import dumps_indented
    from marinbuild.core.versions import JOIN_UNDER
    from marinbuild.executor import Executor

    executor = Executor(prefix="/nonexistent/prefix", executor_info_base_path="/nonexistent/prefix/experiments")
    executor.compute_versions(build_steps("layered", n))
    table = executor.table
    steps = executor.steps
    gc.disable()

    start = time.process_time()
    slotted = [table.indented_version(s) for s in steps]
    slots = time.process_time() - start
    start = time.process_time()
    plain = [dumps_indented(executor.versions[s]) for s in steps]
    dumped = time.process_time() - start
    assert slotted == plain
    text_mb = sum(map(len, plain)) / 1e6
    del slotted, plain

    strs_mb = sum(len(table.version_bytes[s]) for s in steps) / 1e6  # an ASCII str takes its length in bytes
    deep = [s for s in steps if len(table.version_pieces[s]) > 1]
    deep_mb = sum(len(table.version_bytes[s]) for s in deep) / 1e6
    pieces_kb = sum(8 * len(table.version_pieces[s]) for s in deep) / 1e3  # a pointer per piece
    return [
        [
            f"{n:,}",
            "`.executor_info` texts of every step (a cold build writes them)",
            f"{slots:.2f} s",
            f"{dumped:.2f} s",
            f"{dumped / slots:.1f}x faster ({text_mb:,.0f} MB of text)",
        ],
        [
            f"{n:,}",
            "`version_strs` decoded on read, none read (a no-op)",
            "0 MB",
            f"{strs_mb:,.0f} MB",
            f"{strs_mb:,.0f} MB less peak memory",
        ],
        [
            f"{n:,}",
            f"the {len(deep):,} version strings over {JOIN_UNDER:,} bytes, as references to pieces",
            f"{pieces_kb:,.0f} kB",
            f"{deep_mb:,.0f} MB",
            f"{deep_mb:,.0f} MB less peak memory",
        ],
    ]


def table(rows: list[list[str]], command: str) -> str:
    lines = [
        f"`{command}` (CPU seconds or memory held, in one process):",
        "",
        "| steps | mechanism | with it | plain | gain |",
        "| ---: | --- | ---: | ---: | --- |",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000])
    parser.add_argument("--doc", type=Path, help="write the table into this markdown file, between markers")
    args = parser.parse_args(argv)
    rows = [row for n in args.sizes for row in measure(n)]
    flags = " ".join(f"--sizes {' '.join(map(str, args.sizes))}".split())
    text = table(rows, f".venv/bin/python bench/versions_bench.py {flags}")
    print(text)
    if args.doc is not None:
        write_section(args.doc, MARKER, text)


if __name__ == "__main__":
    main()
