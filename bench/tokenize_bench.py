"""Tokenize benchmark: a marinbuild ``tokenize`` against the raw speed of its HF tokenizer, scaling, per-shard cost.

Rows of the table (markdown on stdout, raw numbers with ``--json``):

- ``raw HF tokenizers, 1 core``: ``tokenizers.Tokenizer.encode_batch`` over the same documents, in
  batches of 1,024, in a child process pinned to one CPU with ``TOKENIZERS_PARALLELISM=false``:
  the practical limit of one core;
- ``local, N processes``: the real CLI building the ``tokenize`` target on a fresh prefix with
  ``workers = N`` (local backend). ``per CPU second (shards)`` is tokens / the CPU seconds the
  workers spent building the shards (``cpu_seconds`` in ``logs/shards.jsonl``: reading, JSON,
  tokenizing, writing the shard caches), held against the raw row's tokens / its CPU seconds
  (``vs raw``): CPU time, unlike wall time, does not count waiting for a core on a shared
  machine. ``per core (step)`` is tokens / (the step's wall time x N): everything, worker
  start-up (importing levanter) and the consolidation included;
- ``Ray, N worker nodes``: the same on a real local Ray cluster (``tests/ray/raycluster.py``)
  of N one-CPU nodes, the build a driver of it (``--backend ray``);
- ``one file``: the whole dataset in one plain JSON-lines file, all processes, as one shard
  (``shard_bytes = 0``) and cut into ``--ranges`` byte ranges: what splitting a large file gains;
- ``many small files``: ``--small-files`` files of ``--small-kb`` KB each, local backend, all
  processes, small files grouped into shards of about ``--small-shard-mb`` (enough shards for
  every process to have several, so that the row measures bookkeeping, not an idle process
  waiting for the last large shard): the step's
  wall time against the raw tokenizing time of the same text divided by the processes; the rest
  is marinbuild's and levanter's bookkeeping (hashing inputs, one cache per shard, records,
  consolidating), shown per shard and as a share of the wall time.

The main rows and the Ray rows build a shard per file (``shard_bytes = 0``), so the scaling
rows compare the same shards. ``--doc FILE`` writes the table between the
``<!-- tokenize_bench -->`` markers of FILE (docs/performance.md).

The documents are the quickstart's synthetic stories (``experiments/quickstart/make_corpus.py``,
its generator with another seed), as plain JSON lines; the tokenizer is a byte-level BPE with
``--vocab`` entries trained on them (no network). Speed-ups compare wall times of the step.
A machine shared with other work makes every number noisy: run it on an idle machine.

    .venv/bin/python bench/tokenize_bench.py --mb 8 --doc docs/performance.md
    .venv/bin/python bench/tokenize_bench.py --mb 8 --small-files 200 --no-ray --json /tmp/tok.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "ray"))
sys.path.insert(0, str(REPO / "bench"))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)

BUILD = """load("@marinbuild//rules:data.py", "raw_data")
load("@marinbuild//rules:tokenize.py", "tokenize")

raw_data(name = "docs", urls = ["{pattern}"])

tokenize(name = "tok", train = [":docs"], tokenizer_name = "{tokenizer}", workers = {workers}{shard_bytes})
"""

RAW = """
import json, os, sys, time
os.sched_setaffinity(0, {0})
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Tokenizer
tok = Tokenizer.from_file(sys.argv[1])
texts = [json.loads(line)["text"] for path in sys.argv[2:] for line in open(path)]
start, cpu = time.perf_counter(), time.process_time()
tokens = 0
for i in range(0, len(texts), 1024):
    tokens += sum(len(e.ids) for e in tok.encode_batch(texts[i:i + 1024], add_special_tokens=False))
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
print(json.dumps({"tokens": tokens, "seconds": seconds, "cpu_seconds": cpu,
                  "bytes": sum(len(t.encode()) for t in texts)}))
"""


def _story_maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_corpus", REPO / "experiments" / "quickstart" / "make_corpus.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._story


def write_corpus(folder: Path, files: int, bytes_per_file: int, seed: int) -> list[Path]:
    story = _story_maker()
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(files):
        path = folder / f"part-{i:05d}.jsonl"
        size = 0
        with path.open("w") as f:
            while size < bytes_per_file:
                text = " ".join(story(rng) for _ in range(4))
                line = json.dumps({"text": text}) + "\n"
                f.write(line)
                size += len(line)
        paths.append(path)
    return paths


def train_tokenizer(paths: list[Path], out: Path, vocab: int) -> Path:
    from marinbuild.ml.tokenizer import train_bpe_tokenizer

    texts = [json.loads(line)["text"] for p in paths[:4] for line in p.open()]
    train_bpe_tokenizer(texts, str(out), vocab_size=vocab)
    return out


def raw_rate(tokenizer: Path, paths: list[Path]) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", RAW, str(tokenizer / "tokenizer.json"), *map(str, paths)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout)


def build(
    work: Path,
    data: Path,
    tokenizer: Path,
    workers: int,
    extra: list[str],
    env: dict[str, str],
    shard_bytes: int | None = None,
) -> dict[str, Any]:
    """Build the tokenize target in a fresh workspace (``shard_bytes``: the rule's default when None); the
    step's wall time, tokens and shard seconds."""
    if work.exists():
        shutil.rmtree(work)
    (work / "pipe").mkdir(parents=True)
    (work / "pyproject.toml").write_text('[project]\nname = "tokbench"\n\n[tool.marinbuild]\nprefix = "out"\n')
    option = "" if shard_bytes is None else f", shard_bytes = {shard_bytes}"
    (work / "pipe" / "BUILD.marin").write_text(
        BUILD.format(pattern=f"{data}/*.jsonl", tokenizer=tokenizer, workers=workers, shard_bytes=option)
    )
    events = work / "events.jsonl"
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "marinbuild", "//pipe:tok", "--build_event_json_file", str(events), *extra],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"build failed:\n{proc.stderr[-3000:]}")
    records = [json.loads(line) for line in events.read_text().splitlines()]
    started = next(e["time"] for e in records if e["kind"] == "started" and e["step"] == "pipe/tok")
    ended = next(e["time"] for e in records if e["kind"] == "succeeded" and e["step"] == "pipe/tok")
    out = next((work / "out" / "pipe").glob("tok-*"))
    shards = [json.loads(line) for line in (out / "logs" / "shards.jsonl").read_text().splitlines()]
    meta = json.loads((out / "tokenized.json").read_text())["splits"]["train"]
    return {
        "step_seconds": ended - started,
        "process_seconds": wall,
        "tokens": meta["tokens"],
        "documents": meta["documents"],
        "shards": len(shards),
        "shard_seconds": sum(s["seconds"] for s in shards),
        "shard_cpu_seconds": sum(s.get("cpu_seconds") or s["seconds"] for s in shards),
        "nodes": len({s["node"] for s in shards}),
    }


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MARIN_PREFIX", None)
    env["HF_HUB_OFFLINE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    return env


def ray_builds(root: Path, data: Path, tokenizer: Path, nodes_list: list[int]) -> dict[int, dict[str, Any]]:
    from raycluster import node_env, start_cluster

    os.environ.update(node_env())  # this process joins the cluster too: keep Ray on 127.0.0.1, no auth
    import ray

    results = {}
    for nodes in nodes_list:
        cluster = start_cluster(num_cpus=1, dashboard=False)
        try:
            for _ in range(nodes - 1):
                cluster.add_node({}, num_cpus=1)
            env = {**_env(), **node_env()}
            results[nodes] = build(
                root / f"ray-{nodes}",
                data,
                tokenizer,
                0,
                ["--backend", "ray", "--ray_address", cluster.address],
                env,
                shard_bytes=0,
            )
        finally:
            if ray.is_initialized():
                ray.shutdown()
            cluster.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=float, default=16, help="size of the main dataset, MB of JSON lines")
    parser.add_argument("--files", type=int, default=8, help="files of the main dataset")
    parser.add_argument("--small-files", type=int, default=2000)
    parser.add_argument("--small-kb", type=int, default=100)
    parser.add_argument(
        "--small-shard-mb",
        type=float,
        default=16,
        help="shard_bytes of the many-small-files row, MiB (0: the rule's default)",
    )
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--ray-nodes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-small", action="store_true")
    parser.add_argument("--no-one-file", action="store_true")
    parser.add_argument("--ranges", type=int, default=4, help="byte ranges of the one-file rows")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--doc",
        type=Path,
        default=None,
        help="write the table into this markdown file, between <!-- tokenize_bench --> markers",
    )
    args = parser.parse_args(argv)

    root = Path(tempfile.mkdtemp(prefix="tokbench-", dir=args.dir))
    load_before = os.getloadavg()
    data = root / "data"
    paths = write_corpus(data, args.files, int(args.mb * 1e6 / args.files), seed=1)
    tokenizer = train_tokenizer(paths, root / "tokenizer", args.vocab)
    raw = raw_rate(tokenizer, paths)
    env = _env()
    results: dict[str, Any] = {
        "raw": raw,
        "local": {},
        "ray": {},
        "small": None,
        "cpus": os.cpu_count(),
        "mb": args.mb,
        "files": args.files,
    }
    for n in args.processes:
        results["local"][n] = build(root / f"local-{n}", data, tokenizer, n, [], env, shard_bytes=0)
    if not args.no_one_file:
        one = root / "one" / "all.jsonl"
        one.parent.mkdir()
        with one.open("wb") as f:
            for path in paths:
                f.write(path.read_bytes())
        workers = max(args.processes)
        results["one_file"] = {
            "workers": workers,
            "ranges": args.ranges,
            "whole": build(root / "one-whole", one.parent, tokenizer, workers, [], env, 0),
            "split": build(
                root / "one-split", one.parent, tokenizer, workers, [], env, one.stat().st_size // args.ranges + 1
            ),
        }
    if not args.no_ray:
        results["ray"] = ray_builds(root, data, tokenizer, args.ray_nodes)
    if not args.no_small:
        small = root / "small"
        small_paths = write_corpus(small, args.small_files, args.small_kb * 1000, seed=2)
        small_raw = raw_rate(tokenizer, small_paths)
        workers = max(args.processes)
        results["small"] = {
            "raw": small_raw,
            "workers": workers,
            "files": args.small_files,
            "shard_mb": args.small_shard_mb,
            **build(root / "small-build", small, tokenizer, workers, [], env, int(args.small_shard_mb * 2**20) or None),
        }
    results["load"] = {"before": load_before, "after": os.getloadavg()}
    text = render(results, args)
    print(text)
    if args.doc is not None:
        command = " ".join(["python bench/tokenize_bench.py", *(argv if argv is not None else sys.argv[1:])])
        write_section(args.doc, "tokenize_bench", f"`{command}`\n\n{text}\n")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    shutil.rmtree(root, ignore_errors=True)
    return 0


def render(r: dict[str, Any], args: argparse.Namespace) -> str:
    raw = r["raw"]
    raw_rate_ = raw["tokens"] / raw["seconds"]
    raw_cpu_rate = raw["tokens"] / raw["cpu_seconds"]
    lines = [
        f"Dataset: {r['mb']:g} MB of JSON lines in {r['files']} files, {raw['tokens']:,} tokens "
        f"(BPE, vocab {args.vocab}); {r['cpus']} CPUs.",
        "",
        "| run | step wall | tokens/s | per CPU second (shards) | vs raw | per core (step) | speed-up |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| raw HF tokenizers, 1 core | {raw['seconds']:.1f} s | {raw_rate_:,.0f} | {raw_cpu_rate:,.0f} | 100% | "
        f"{raw_rate_:,.0f} | |",
    ]

    def row(name: str, b: dict[str, Any], cores: int, base: dict[str, Any] | None) -> str:
        shard_rate = b["tokens"] / b["shard_cpu_seconds"]
        step_rate = b["tokens"] / b["step_seconds"]
        speed = f"{base['step_seconds'] / b['step_seconds']:.2f}x" if base is not None else ""
        return (
            f"| {name} | {b['step_seconds']:.1f} s | {step_rate:,.0f} | {shard_rate:,.0f} | "
            f"{shard_rate / raw_cpu_rate:.0%} | {step_rate / cores:,.0f} | {speed} |"
        )

    local = {int(k): v for k, v in r["local"].items()}
    first = local.get(min(local)) if local else None
    for n, b in sorted(local.items()):
        lines.append(row(f"local, {n} process{'es' if n > 1 else ''}", b, n, first if n != min(local) else None))
    one = r.get("one_file")
    if one:
        w = one["workers"]
        lines.append(row(f"one file, local, {w} processes: 1 shard", one["whole"], w, None))
        lines.append(row(f"one file, local, {w} processes: {one['ranges']} byte ranges", one["split"], w, one["whole"]))
    ray_runs = {int(k): v for k, v in r["ray"].items()}
    first_ray = ray_runs.get(min(ray_runs)) if ray_runs else None
    for n, b in sorted(ray_runs.items()):
        lines.append(
            row(
                f"Ray, {n} worker node{'s' if n > 1 else ''} (1 CPU each; shards ran on {b['nodes']})",
                b,
                n,
                first_ray if n != min(ray_runs) else None,
            )
        )
    small = r.get("small")
    if small:
        raw_s = small["raw"]["seconds"] / small["workers"]
        over = small["step_seconds"] - raw_s
        shard_size = f"shard_bytes {small['shard_mb']:g} MiB" if small.get("shard_mb") else "default shard_bytes"
        lines += [
            "",
            "| many small files | files | shards | step wall | raw tokenizing / processes | bookkeeping | "
            "per shard | share of wall |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {args.small_kb} KB each, local, {small['workers']} processes, {shard_size} | "
            f"{small['files']:,} | "
            f"{small['shards']:,} | "
            f"{small['step_seconds']:.1f} s | {raw_s:.1f} s | {over:.1f} s | "
            f"{over / small['shards'] * 1000:.0f} ms | {over / small['step_seconds']:.0%} |",
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
