"""Raw document collections: the manifest a ``raw_data`` step writes, and reading documents from it.

``manifest.json`` holds ``kind``, ``files`` (workspace files copied into the output), ``urls`` (fsspec URLs or globs
read in place; one ending in ``/`` is every document file below it, as Marin's tokenize reads a folder) and
``documents``. Documents are JSON lines (optionally compressed), JSON arrays or Parquet, the text under ``text_key``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import fsspec

from marinbuild.ml import download
from marinbuild.ml.documents import document_format, is_document
from marinbuild.ml.download_sources import matcher
from marinbuild.ml.records import is_json_array

MANIFEST = "manifest.json"


def write_manifest(output_path: str, files: list[str], urls: list[str], documents: int | None) -> dict[str, Any]:
    manifest = {"kind": "raw_data", "files": files, "urls": urls, "documents": documents}
    with fsspec.open(os.path.join(output_path, MANIFEST), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def read_manifest(raw_output: str) -> dict[str, Any]:
    path = os.path.join(raw_output, MANIFEST)
    try:
        with fsspec.open(path, "r") as f:
            return json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{raw_output} has no {MANIFEST}: is it the output of a raw_data or download target?"
        ) from None


def expand(patterns: Iterable[str]) -> list[str]:
    """Full URLs: each URL, a glob's matches, the documents below a ``.../`` folder, sorted; no match is an error."""
    out: list[str] = []
    for pattern in patterns:
        if not pattern.endswith("/") and not any(ch in pattern for ch in "*?["):
            out.append(pattern)
            continue
        fs, root = fsspec.core.url_to_fs(pattern)
        if pattern.endswith("/"):  # Marin's tokenize leaves out download provenance, as here
            matches = sorted(p for p in fs.find(root) if is_document(p) and not p.endswith("/provenance.json"))
        else:
            matches = sorted(fs.glob(pattern))
        if not matches:
            raise FileNotFoundError(f"no files match {pattern}")
        protocol = pattern.split("://", 1)[0] + "://" if "://" in pattern else ""
        out.extend(m if "://" in m or not protocol else protocol + m for m in matches)
    return out


def document_paths(raw_outputs: Iterable[str]) -> list[str]:
    """Every document file of these ``raw_data`` or ``download`` outputs, in order (globs expanded)."""
    return [path for raw in raw_outputs for path in _documents_of(raw)]


def download_documents(output: str, patterns: list[str] | None = None) -> list[str]:
    """The document files of a ``download`` output (or Marin's), in order; with ``patterns``, those matching one."""
    wanted = matcher(list(patterns or []))
    manifest = download.read_manifest(output)
    if manifest is not None and manifest.get("kind") == "download":
        subdir = (manifest.get("subdir") or "").strip("/")
        relative = [f"{subdir}/{f['path']}" if subdir else f["path"] for f in manifest["files"]]
        return [f"{output.rstrip('/')}/{r}" for r in relative if is_document(r) and wanted(r)]
    if manifest is None and _exists(os.path.join(output, download.PROVENANCE)):
        fs, root = fsspec.core.url_to_fs(output)
        root = root.rstrip("/")
        protocol = output.split("://", 1)[0] + "://" if "://" in output else ""
        found = []
        for path in sorted(fs.find(root)):
            relative = path[len(root) + 1 :]
            if relative.split("/", 1)[0] in download.RESERVED or not is_document(path) or not wanted(relative):
                continue
            found.append(protocol + path if protocol and "://" not in path else path)
        if not found:
            raise FileNotFoundError(
                f"{output}: a Marin download folder with no document files matching {patterns or 'any name'}"
            )
        return found
    raise FileNotFoundError(
        f"{output} is not the output of a download target (no {download.MANIFEST} of kind "
        f"download, no Marin {download.PROVENANCE})"
    )


def _documents_of(output: str) -> list[str]:
    manifest = download.read_manifest(output)
    if manifest is None or manifest.get("kind") == "download":
        if manifest is not None or _exists(os.path.join(output, download.PROVENANCE)):
            return download_documents(output)
        manifest = read_manifest(output)  # raises, naming what is missing
    return [*manifest.get("files", []), *expand(manifest.get("urls", []))]


def _exists(path: str) -> bool:
    fs, p = fsspec.core.url_to_fs(path)
    return fs.exists(p)


def iter_documents(path: str) -> Iterator[dict[str, Any]]:
    ext, compression = document_format(path)
    if ext == ".parquet":
        import pyarrow.parquet as pq

        with fsspec.open(path, "rb", compression=compression) as f:
            table = pq.ParquetFile(f)
            for batch in table.iter_batches():
                yield from batch.to_pylist()
        return
    with fsspec.open(path, "rt", compression=compression, encoding="utf-8") as f:
        if ext == ".json" and is_json_array(path, compression):
            yield from json.load(f)
        else:
            for line in f:
                if line.strip():
                    yield json.loads(line)


def iter_texts(paths: Iterable[str], text_key: str = "text", limit: int | None = None) -> Iterator[str]:
    """The ``text_key`` field of every document in ``paths`` (at most ``limit``)."""
    count = 0
    for path in paths:
        for record in iter_documents(path):
            if limit is not None and count >= limit:
                return
            text = record.get(text_key)
            if not isinstance(text, str):
                raise KeyError(f"{path}: a record has no string field {text_key!r} (fields: {sorted(record)})")
            count += 1
            yield text


def count_documents(paths: Iterable[str]) -> int:
    return sum(1 for path in paths for _ in iter_documents(path))
