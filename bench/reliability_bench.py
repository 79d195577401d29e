"""Reliability figures: kill a small build at every metadata write, and a random kill soak of concurrent runners.

``python bench/reliability_bench.py [--rounds N] [--runners K] [--seed S] [--json FILE]`` prints what the tests in
``tests/reliability`` assert, with bigger numbers when asked:

- the fault-point sweep: how many metadata writes (fault points) a build of five steps, one of them failing,
  passes; a kill at each; whether every rerun completed with every step's status and output correct, without
  waiting on the dead runner's leases;
- the soak: ``--rounds`` rounds of ``--runners`` runners of the same build on one prefix, each SIGKILLed after a
  random delay, then one run to completion: kills, finished runs, steps checked (every SUCCESS against a clean
  build's output), violations (SUCCESS over a wrong output, a failed run that was not killed, two live runners in
  one step), the longest time a finished run waited on another runner's step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "reliability"), os.path.join(HERE, "..", "tests")]

import harness as h  # noqa: E402
import soak  # noqa: E402


def sweep(workdir: str) -> dict:
    golden_prefix = os.path.join(workdir, "golden")
    points = h.fault_points(golden_prefix, "--fail")
    golden = h.outputs(golden_prefix)
    wrong: list[str] = []
    longest = 0.0
    for n, name in enumerate(points, 1):
        prefix = os.path.join(workdir, f"kill-{n}")
        h.kill_at(prefix, points, n, "--fail")
        again = h.run(prefix, "--fail")
        longest = max([longest, *again.result.get("waits", [])])
        if again.code != 1 or h.outputs(prefix) != golden or again.result.get("waits"):
            wrong.append(f"point {n} ({name}): {again.result}")
    return {
        "fault_points": len(points),
        "kills": len(points),
        "reruns_correct": len(points) - len(wrong),
        "violations": wrong,
        "longest_wait": longest,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--runners", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="marinbuild-reliability-") as workdir:
        figures = {
            "sweep": sweep(os.path.join(workdir, "sweep")),
            "soak": soak.soak(os.path.join(workdir, "soak", "p"), args.rounds, args.runners, args.seed).to_dict(),
        }
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0 if not figures["sweep"]["violations"] and not figures["soak"]["violations"] else 1


if __name__ == "__main__":
    sys.exit(main())
