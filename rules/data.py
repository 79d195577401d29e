"""``raw_data``: a collection of documents, from workspace files or fsspec URLs (docs/ml-rules.md).

    raw_data(name = "stories", srcs = glob(["data/train-*.jsonl.gz"]))
    raw_data(name = "dclm", urls = ["gs://marin-us-central2/raw/dclm/a3b142c/**/*.jsonl.zst"])
    raw_data(name = "proofpile_train", downloads = [":proofpile_2_raw"], patterns = ["**/train/*.jsonl.zst"])

``srcs`` are hashed into the version and copied into the output. ``urls`` are versioned as written (pin what a URL
points at in the URL, as Marin does) and read in place when a consumer runs, never while the graph is loaded. A
``mirrored(path, budget_gb)`` URL is copied into the build's prefix through ``mirror://`` when the step runs (at most
``budget_gb``; the version is the plain path's) and read there. ``downloads`` are ``download`` targets whose files
(matching ``patterns``) are read in place. The output is ``manifest.json`` (``marinbuild.ml.corpus``) and ``files/``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from marinbuild.analysis.analyze import RuleContext
from marinbuild.load import attr, rule


def _raw_data_impl(ctx: RuleContext) -> dict[str, Any]:
    import fsspec

    from marinbuild.ml.corpus import count_documents, download_documents, write_manifest
    from marinbuild.ml.documents import document_format

    if not ctx.attr.srcs and not ctx.attr.urls and not ctx.attr.downloads:
        raise ValueError(f"raw_data {ctx.label}: give srcs (workspace files), urls or downloads")
    if ctx.attr.patterns and not ctx.attr.downloads:
        raise ValueError(f"raw_data {ctx.label}: patterns select among downloads' files; give downloads")
    package_dir = ctx.workspace / ctx.package if ctx.package else ctx.workspace
    files: list[str] = []
    for src in ctx.attr.srcs:
        document_format(src)  # refuse what tokenize could not read, now rather than later
        relative = os.path.relpath(src, package_dir)
        if relative.startswith(".."):
            relative = Path(src).name
        dest = os.path.join(ctx.output_path, "files", relative)
        fs, dest_path = fsspec.core.url_to_fs(dest)
        fs.makedirs(os.path.dirname(dest_path), exist_ok=True)
        fs.put_file(src, dest_path)
        files.append(dest)
    for url in ctx.attr.urls:
        if not url.endswith("/") and not any(ch in url for ch in "*?["):
            document_format(url)
    urls = list(ctx.attr.urls)
    if any(url.startswith("mirror://") for url in urls):  # mirrored(...): copied into this region once, read there
        from marinbuild.store.mirror import resolve_url

        urls = [resolve_url(url) for url in urls]
    for output in ctx.attr.downloads:
        urls.extend(download_documents(output, ctx.attr.patterns))
    return write_manifest(ctx.output_path, files, urls, count_documents(files) if files and not urls else None)


raw_data = rule(
    implementation=_raw_data_impl,
    attrs={
        "srcs": attr.source_files(doc="document files of this package (.jsonl[.gz], .json, .parquet); content-hashed"),
        "urls": attr.list(
            of=attr.string(mirrorable=True),
            doc="fsspec URLs or globs of document files, or folders (.../), read in place (never fetched early); "
            "mirrored(path) ones are copied into the build's region first",
        ),
        "downloads": attr.label_list(doc="download targets: their document files, read in place"),
        "patterns": attr.list(
            of=str,
            doc="with downloads: globs selecting among their files, relative to each "
            "download's output folder (default: every document file)",
        ),
        "description": attr.string(versioned=False, doc="what the data is, for people"),
    },
    doc="A collection of documents: workspace files (content-hashed, copied), fsspec URLs or download targets "
    "(read in place).",
)
