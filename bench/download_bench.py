"""The ``download`` rule's copy against a plain fsspec copy of the same files, from a file server on loopback.

    .venv/bin/python bench/download_bench.py                       # 32 files of 8 MiB, 8 threads
    .venv/bin/python bench/download_bench.py --files 64 --mib 4 --workers 4
    .venv/bin/python bench/download_bench.py --doc docs/performance.md   # its table there

Peers, in one process, each run ``--runs`` times into a fresh folder (best time kept):

- ``fsspec copy``: every file streamed with fsspec's HTTP filesystem into a local file, 8 MiB chunks,
  ``--workers`` threads: the transfer alone;
- ``download``: ``marinbuild.ml.download.download`` on the same folder URL with ``workers`` threads:
  listing, streaming, sha256 of every byte, the rename, a done marker per file, the manifest;
- ``download, all done``: the same again on the finished output (listing and reading the markers:
  what a resumed download pays for the files it keeps).

The server is python's ``http.server`` in a thread of this process, so the numbers are a ratio of
marinbuild's work to the transfer's on one machine, not a network's speed.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import http.server
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_section import write_section  # noqa: E402  (bench/ is not a package)

CHUNK = 8 * 1024 * 1024
DEFAULTS = {"files": 32, "mib": 8, "workers": 8, "runs": 3}
"""The flags' defaults: ``--doc`` names only the flags given otherwise."""


def _serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(root)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


def _fsspec_copy(url: str, names: list[str], dest: Path, workers: int) -> None:
    import fsspec

    http = fsspec.filesystem("http")

    def one(name: str) -> None:
        with http.open(f"{url}/{name}", "rb", block_size=0) as src, open(dest / name, "wb") as out:
            while chunk := src.read(CHUNK):
                out.write(chunk)

    dest.mkdir(parents=True)
    with cf.ThreadPoolExecutor(workers) as pool:
        list(pool.map(one, names))


def _download(url: str, dest: Path, workers: int) -> dict:
    from marinbuild.ml.download import download

    payload = {
        "output_path": str(dest),
        "label": "//bench:dl",
        "hf_dataset": None,
        "revision": None,
        "url": url + "/",
        "patterns": [],
        "checksums": {},
        "subdir": "",
        "endpoint": None,
        "workers": workers,
        "file_resources": None,
    }
    return download(payload)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, default in DEFAULTS.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--doc", help="write the table into this file (docs/performance.md), between markers")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="download-bench-"))
    try:
        src = work / "src"
        src.mkdir()
        names = [f"part-{i:04d}.bin" for i in range(args.files)]
        for name in names:
            (src / name).write_bytes(os.urandom(args.mib * 1024 * 1024))
        httpd, url = _serve(src)
        rows: dict[str, float] = {}

        def timed(label: str, fn) -> None:
            best = float("inf")
            for run in range(args.runs):
                start = time.perf_counter()
                fn(run)
                best = min(best, time.perf_counter() - start)
            rows[label] = best

        timed("fsspec copy", lambda run: _fsspec_copy(url, names, work / f"plain-{run}", args.workers))
        timed("download", lambda run: _download(url, work / f"dl-{run}", args.workers))
        timed("download, all done", lambda run: _download(url, work / "dl-0", args.workers))
        httpd.shutdown()
        total_mib = args.files * args.mib
        base = rows["fsspec copy"]
        lines = [
            f"{args.files} files x {args.mib} MiB ({total_mib} MiB), {args.workers} threads, best of {args.runs}, "
            f"{os.cpu_count()} CPUs:",
            "",
            "| peer | seconds | MiB/s | vs fsspec copy |",
            "| --- | ---: | ---: | ---: |",
        ]
        for label, seconds in rows.items():
            rate = f"{total_mib / seconds:,.0f}" if label != "download, all done" else "-"
            lines.append(f"| {label} | {seconds:.3f} | {rate} | {seconds / base:.2f}x |")
        print("\n".join(lines))
        if args.doc:
            flags = [
                f"--{name}={getattr(args, name)}"
                for name, default in DEFAULTS.items()
                if getattr(args, name) != default
            ]
            command = shlex.join([".venv/bin/python", "bench/download_bench.py", *flags])
            write_section(args.doc, "download_bench", f"`{command}`: " + "\n".join(lines) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
