"""What a ``download`` copies: the files of a source, each with its size and the checksums the source publishes.

Sources are listed when the step runs, never while the graph is loaded. ``list_hub``: a Hugging Face dataset at a
revision, resolved to its commit first (a branch moving mid-download changes nothing); checksums are LFS sha256 or git
blob sha1; files are streamed from ``resolve`` URLs with ``huggingface_hub``'s headers, never through its local cache.
``list_fsspec``: a file or folder; GCS's md5 (not for composite objects) and crc32c are checked, other filesystems'
files by size and the BUILD file's ``checksums``. ``patterns`` are fsspec globs relative to the root (``**`` crosses
folders), as Marin's ``hf_urls_glob``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from marinbuild.ml.checksums import from_gcs_base64, parse_expected
from marinbuild.store.fs import filesystem_for


@dataclass(frozen=True)
class Entry:
    """One file to copy: ``path`` relative to the source root (and to the output's file folder)."""

    path: str
    url: str
    size: int | None
    published: dict[str, str] = field(default_factory=dict)
    """Checksums the source publishes (or the BUILD file gives), by kind, hex."""
    hub: bool = False  # Fetched with the Hub's headers (the token).


def matcher(patterns: list[str]) -> Any:
    """A predicate on relative paths: matches one of ``patterns`` (every path when there is none)."""
    if not patterns:
        return lambda path: True
    from fsspec.utils import glob_translate

    compiled = [re.compile(glob_translate(p.lstrip("/"))) for p in patterns]
    return lambda path: any(c.match(path) for c in compiled)


def hub_commit(dataset: str, revision: str, endpoint: str | None) -> str:
    """The full commit hash ``revision`` names in ``dataset``'s repository."""
    from huggingface_hub import HfApi

    info = HfApi(endpoint=endpoint).dataset_info(dataset, revision=revision)
    if not info.sha:
        raise ValueError(f"Hugging Face dataset {dataset}: revision {revision} resolves to no commit")
    return info.sha


def list_hub(dataset: str, commit: str, patterns: list[str], endpoint: str | None) -> list[Entry]:
    """The files of ``dataset`` at ``commit`` matching ``patterns``, sorted by path."""
    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.hf_api import RepoFile

    wanted = matcher(patterns)
    entries = []
    for item in HfApi(endpoint=endpoint).list_repo_tree(dataset, recursive=True, revision=commit, repo_type="dataset"):
        if not isinstance(item, RepoFile) or not wanted(item.path):
            continue
        published = {"sha256": item.lfs.sha256} if item.lfs is not None else {"git_sha1": item.blob_id}
        url = hf_hub_url(dataset, item.path, repo_type="dataset", revision=commit, endpoint=endpoint)
        entries.append(Entry(item.path, url, item.size, published, hub=True))
    return sorted(entries, key=lambda e: e.path)


def list_fsspec(url: str, patterns: list[str], checksums: dict[str, str]) -> list[Entry]:
    """The files at ``url`` matching ``patterns``, sorted; ``checksums`` are checked as if the source published them."""
    fs = _filesystem(url)
    protocol = url.split("://", 1)[0] + "://" if "://" in url else ""
    root = url.rstrip("/")
    stripped = fs._strip_protocol(root)
    infos: dict[str, dict[str, Any]]
    if not url.endswith("/") and fs.isfile(stripped):
        infos = {stripped: fs.info(stripped)}
        base = stripped.rsplit("/", 1)[0]
    else:
        infos = fs.find(stripped, detail=True)
        base = stripped
    wanted = matcher(patterns)
    entries = []
    for path, info in infos.items():
        if info.get("type", "file") != "file":
            continue
        full = path if "://" in path else protocol + path
        relative = _relative(fs._strip_protocol(full), base)
        if not wanted(relative):
            continue
        if info.get("size") is None:  # an https folder listing gives links, not sizes: ask each file
            info = {**info, **fs.info(full if "://" in full else path)}
        published = _published(info)
        for kind_value in [checksums[relative]] if relative in checksums else []:
            kind, digest = parse_expected(kind_value)
            published[kind] = digest
        entries.append(Entry(relative, full, info.get("size"), published))
    missing = sorted(set(checksums) - {e.path for e in entries})
    if missing:
        raise ValueError(f"checksums given for files the source does not have: {', '.join(missing)}")
    return sorted(entries, key=lambda e: e.path)


def _filesystem(url: str) -> Any:
    """gs:// through marinbuild's retrying gcsfs (which honours ``STORAGE_EMULATOR_HOST``); others by fsspec."""
    if url.startswith(("gs://", "gcs://")):
        return filesystem_for(url)
    import fsspec

    return fsspec.core.url_to_fs(url)[0]


def _relative(path: str, base: str) -> str:
    base = base.rstrip("/")
    if not path.startswith(base + "/"):
        raise ValueError(f"listing of {base} returned {path}, which is not below it")
    return path[len(base) + 1 :]


def _published(info: dict[str, Any]) -> dict[str, str]:
    """The checksums an object's metadata carries (GCS: md5Hash, crc32c, base64)."""
    out: dict[str, str] = {}
    if info.get("md5Hash"):
        out["md5"] = from_gcs_base64(info["md5Hash"])
    if info.get("crc32c"):
        out["crc32c"] = from_gcs_base64(info["crc32c"])
    return out
