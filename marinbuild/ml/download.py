"""Copy a dataset into a step's output folder, file by file, verified and resumable (the ``download`` rule's work).

Output (docs/download.md): the files under ``<out>[/<subdir>]`` (Marin's ``download_hf`` layout), ``manifest.json``,
``provenance.json`` (Marin's keys), ``.download/done/<path>.json`` (a done marker per verified file) and
``.download/files.jsonl`` (a line per file per attempt). Files whose done marker matches the listing
(``download_sources``) are reused; the others are copied in parallel by ``download_work.fetch_file`` on ``shard_pool``'s
pool (Ray actors on Ray, else ``workers`` threads). The first failure stops the step once the files in flight end;
verified files stay done, so a rerun fetches only the rest."""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from marinbuild.ml.download_sources import Entry, hub_commit, list_fsspec, list_hub
from marinbuild.ml.download_work import fetch_file, matches, read_marker
from marinbuild.ml.run_log import RunLog
from marinbuild.ml.shard_pool import open_pool
from marinbuild.run.step_progress import report
from marinbuild.store import fs as store_fs

MANIFEST = "manifest.json"
PROVENANCE = "provenance.json"
STATE_DIR = ".download"
RESERVED = (MANIFEST, PROVENANCE, STATE_DIR)
DEFAULT_WORKERS = 8

logger = logging.getLogger("marinbuild.ml.download")


def payload_of(attr: Any, output_path: str, label: str) -> dict[str, Any]:
    """The job of a ``download`` target from its attributes (checked at load time by ``download_attrs``)."""
    subdir = (attr.subdir or "").strip("/")
    return {
        "output_path": output_path,
        "label": label,
        "hf_dataset": attr.hf_dataset or None,
        "revision": attr.revision or None,
        "url": attr.url or None,
        "patterns": list(attr.patterns or []),
        "checksums": dict(attr.checksums or {}),
        "subdir": subdir,
        "endpoint": attr.endpoint or None,
        "workers": int(attr.workers or DEFAULT_WORKERS),
        "file_resources": dict(attr.file_resources) if attr.file_resources else None,
    }


def files_root(payload: dict[str, Any]) -> str:
    out = payload["output_path"]
    return store_fs.join(out, payload["subdir"]) if payload.get("subdir") else out


def list_source(payload: dict[str, Any]) -> tuple[dict[str, Any], list[Entry]]:
    """(the source as the manifest records it, its files to copy)."""
    if payload.get("hf_dataset"):
        dataset, revision, endpoint = payload["hf_dataset"], payload["revision"], payload.get("endpoint")
        commit = hub_commit(dataset, revision, endpoint)
        source = {"hf_dataset": dataset, "revision": revision, "commit": commit, "patterns": payload["patterns"]}
        entries = list_hub(dataset, commit, payload["patterns"], endpoint)
        where = f"Hugging Face dataset {dataset} at {revision}"
    else:
        source = {"url": payload["url"], "patterns": payload["patterns"]}
        entries = list_fsspec(payload["url"], payload["patterns"], payload.get("checksums", {}))
        where = payload["url"]
    if not entries:
        patterns = ", ".join(payload["patterns"]) or "(all files)"
        raise FileNotFoundError(f"download {payload['label']}: no files in {where} match {patterns}")
    if not payload.get("subdir"):
        clashes = [e.path for e in entries if e.path.split("/", 1)[0] in RESERVED]
        if clashes:
            raise ValueError(
                f"download {payload['label']}: source files {clashes[:3]} would overwrite the "
                f"output's own {', '.join(RESERVED)}; set subdir to put the files in a folder"
            )
    return source, entries


def _marker(out: str, path: str) -> str:
    return store_fs.join(out, f"{STATE_DIR}/done/{path}.json")


def _marked_paths(out: str) -> set[str]:
    """The relative paths of the files with a done marker: one listing, so a fresh download reads no marker."""
    done = store_fs.join(out, f"{STATE_DIR}/done")
    fs = store_fs.filesystem_for(done)
    root = fs._strip_protocol(done).rstrip("/")
    try:
        found = fs.find(root)
    except FileNotFoundError:
        return set()
    return {p[len(root) + 1 : -len(".json")] for p in found if p.startswith(root + "/") and p.endswith(".json")}


@dataclass
class _Progress:
    total: int
    done: int = 0
    fetched_bytes: int = 0
    start: float = field(default_factory=time.time)
    last: float = 0.0

    def report(self, force: bool = False) -> None:
        now = time.time()
        if not force and now - self.last < 1.0:
            return
        self.last = now
        rate = self.fetched_bytes / max(now - self.start, 1e-9)
        text = f"{self.done}/{self.total} files, {rate / 1e6:,.1f} MB/s"
        if not report(
            text, files_done=self.done, files_total=self.total, bytes=self.fetched_bytes, bytes_per_s=round(rate, 1)
        ):
            logger.info("download: %s", text)


def download(payload: dict[str, Any]) -> dict[str, Any]:
    """Copy every listed file not already done, verify and commit each; write the manifest; return a summary."""
    out = payload["output_path"]
    if (payload.get("url") or "").startswith("mirror://"):  # mirrored(...): copied into this region once, read there
        from marinbuild.store.mirror import resolve_url

        payload = {**payload, "url": resolve_url(payload["url"])}
    source, entries = list_source(payload)
    root = files_root(payload)
    jobs: list[dict[str, Any]] = [
        {
            "path": e.path,
            "url": e.url,
            "size": e.size,
            "published": e.published,
            "hub": e.hub,
            "dest": store_fs.join(root, e.path),
            "marker": _marker(out, e.path),
        }
        for e in entries
    ]
    marked = _marked_paths(out)
    with cf.ThreadPoolExecutor(16) as readers:  # one small read per marked file: in parallel on an object store
        markers = list(readers.map(lambda job: read_marker(job["marker"]) if job["path"] in marked else None, jobs))
    log = RunLog(store_fs.join(out, f"{STATE_DIR}/files.jsonl"))
    records: dict[str, dict[str, Any]] = {}
    todo = []
    for job, record in zip(jobs, markers, strict=True):
        if matches(record, job):
            assert record is not None
            records[job["path"]] = record
            log.add({"path": job["path"], "state": "cached", "size": record.get("size")})
        else:
            todo.append(job)
    logger.info(
        "download %s: %d files, %d already done, %d to fetch",
        payload["label"],
        len(jobs),
        len(jobs) - len(todo),
        len(todo),
    )
    states = {"fetched": 0, "cached": len(jobs) - len(todo)}
    progress = _Progress(total=len(jobs), done=len(jobs) - len(todo))
    progress.report(force=True)

    def on_result(job: dict[str, Any], result: dict[str, Any]) -> None:
        state = result.pop("state")
        seconds, node = result.pop("seconds", None), result.pop("node", None)
        records[job["path"]] = result
        states[state] += 1
        progress.done += 1
        if state == "fetched":
            progress.fetched_bytes += int(result.get("size") or 0)
        log.add({"path": job["path"], "state": state, "size": result.get("size"), "seconds": seconds, "node": node})
        progress.report()

    pool = open_pool(
        payload.get("workers") or DEFAULT_WORKERS, payload.get("file_resources"), offline=False, threads=True
    )
    try:
        pool.run(fetch_file, todo, on_result, on_tick=progress.report)
    finally:
        log.flush()
        pool.close()
    progress.report(force=True)
    files = [records[e.path] for e in entries]
    total = sum(int(r.get("size") or 0) for r in files)
    manifest = {
        "kind": "download",
        "source": source,
        "subdir": payload.get("subdir", ""),
        "files": files,
        "bytes": total,
    }
    store_fs.write_atomic(store_fs.join(out, MANIFEST), json.dumps(manifest, indent=2).encode())
    _write_provenance(out, source, [r["source"] for r in files])
    logger.info(
        "download %s: %d files fetched, %d already done, %d bytes in all",
        payload["label"],
        states["fetched"],
        states["cached"],
        total,
    )
    return {"kind": "download", "source": source, "files": len(files), "bytes": total, **states}


def _write_provenance(out: str, source: dict[str, Any], links: list[str]) -> None:
    """``provenance.json`` with the keys Marin's ``download_hf`` writes (``write_provenance_json``)."""
    meta = {
        "dataset": source.get("hf_dataset") or source.get("url"),
        "version": source.get("revision"),
        "links": links,
        "access_time": datetime.now(UTC).isoformat(),
    }
    store_fs.write_atomic(store_fs.join(out, PROVENANCE), json.dumps(meta, indent=4, sort_keys=True).encode())


def read_manifest(output: str) -> dict[str, Any] | None:
    data = store_fs.read_bytes(store_fs.join(output, MANIFEST))
    return json.loads(data) if data is not None else None
