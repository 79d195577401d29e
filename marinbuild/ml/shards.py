"""Tokenize shards as content-addressed actions: what a shard is, its key, where its cache lives.

A shard is a list of pieces (``marinbuild.ml.shard_plan``): one whole file, one range of a large file, or a
group of small files. A one-file shard's key is the sha256 of::

    {"kind": "tokenize-shard/1", "input": <input identity>, "format": [".jsonl", "gzip"],
     "text_key": "text", "tokenizer": <tokenizer identity>, "options": {"enforce_bos": true, ...}}

and any other shard's of ``{"kind": "tokenize-shard/2", "pieces": [[<input identity>, ".jsonl", null,
[start, end] or null], ...], "text_key", "tokenizer", "options"}`` (the one-file form is the first
version's, kept so older shards are still found). How a split was cut (``shard_bytes``) is not in the key:
the pieces are. An input's identity is its content digest for a local file (two copies of one file are one
shard), else path, size and the object's generation (GCS), ETag (S3) or modification time; a tokenizer's
is the digest of its files for a directory, else its Hub name.

A shard's result lives at ``<store>/<key[:2]>/<key>/`` (store: ``<prefix>/tokenize_shards`` unless the target
says otherwise): a levanter cache by levanter's ``write_levanter_cache`` in ``cache-<id>/``, ``shard.json``,
and last the commit, an action-cache record. A shard without its record is not done (a killed build left
it): it is built again in a new ``cache-<id>/``, removing earlier attempts' files older than
``LEFTOVER_AGE``. Two builds building one shard at once each write their own ``cache-<id>/`` (the same
tokens). Within one build a file given twice (or the same content under two names) is built once.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from marinbuild.ml.documents import document_format
from marinbuild.ml.shard_plan import Piece, file_pieces, group
from marinbuild.store import action_cache
from marinbuild.store.prefix_walk import mtime_from_info

KIND = "tokenize-shard/1"
KIND_PIECES = "tokenize-shard/2"
SHARD_FILE = "shard.json"
STORE_DIR = "tokenize_shards"
LEFTOVER_AGE = 6 * 3600.0
LOOKUPS = 32  # files hashed or stat'ed, shards looked up, at a time: an object store answers each in tens of ms


@dataclass(frozen=True)
class Shard:
    """What to tokenize (``pieces``, in order), and where its result goes. ``path`` names it for people."""

    index: int
    path: str
    key: str
    dir: str
    pieces: tuple[Piece, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "pieces": [asdict(p) for p in self.pieces]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Shard:
        pieces = tuple(
            Piece(p["path"], p["input"], p["size"], tuple(p["span"]) if p["span"] else None) for p in data["pieces"]
        )
        return cls(data["index"], data["path"], data["key"], data["dir"], pieces)


@dataclass
class ShardResult:
    """What a finished shard holds (``shard.json``)."""

    key: str
    path: str
    cache: str
    documents: int
    tokens: int
    skipped: int = 0
    skipped_examples: list[str] | None = None
    skipped_by_file: dict[str, int] | None = None
    truncated: str | None = None
    started: float = 0.0  # when a worker took it (epoch seconds)
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # reading, tokenizing, writing; not the worker's start, which ``seconds`` includes
    node: str = ""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def default_store(output_path: str, relative: str) -> str:
    """``<prefix>/tokenize_shards`` for an output at ``<prefix>/<relative>`` (``<package>/<name>-<hash>``, or an
    ``override_output_path``); an output placed outside the prefix (an absolute override) keeps them beside it."""
    levels = 1 if "://" in relative or relative.startswith("/") else len([p for p in relative.split("/") if p])
    return f"{output_path.rstrip('/').rsplit('/', levels)[0]}/{STORE_DIR}"


def input_info(path: str) -> tuple[str, int]:
    """(identity, size in bytes): a local file's content digest; an object's path, size and generation (or ETag,
    or mtime)."""
    fs, p = fsspec.core.url_to_fs(path)
    if isinstance(fs, LocalFileSystem):
        digest = hashlib.sha256()
        size = 0
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
        return f"sha256:{digest.hexdigest()}", size
    info = fs.info(p)
    keys = ("generation", "ETag", "etag", "mtime", "LastModified", "updated")  # GCS, S3, local and others
    version = next((info[k] for k in keys if info.get(k)), None)
    if version is None:
        raise ValueError(f"{path}: the filesystem reports no generation, ETag or modification time to key it on")
    return f"{path}|size={info.get('size')}|version={version}", int(info.get("size") or 0)


def tokenizer_identity(spec: str, local_dir: str | None) -> str:
    """The digest of a tokenizer directory's files, else the Hub name as given."""
    if local_dir is None:
        return f"hub:{spec}"
    digest = hashlib.sha256()
    for name in sorted(os.listdir(local_dir)):
        full = os.path.join(local_dir, name)
        if os.path.isfile(full):
            digest.update(name.encode() + b"\0")
            with open(full, "rb") as f:
                digest.update(hashlib.sha256(f.read()).digest())
    return f"sha256:{digest.hexdigest()}"


def shard_key(input_id: str, path: str, text_key: str, tokenizer_id: str, options: dict[str, Any]) -> str:
    ext, compression = document_format(path)
    key = {
        "kind": KIND,
        "input": input_id,
        "format": [ext, compression],
        "text_key": text_key,
        "tokenizer": tokenizer_id,
        "options": options,
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def pieces_key(pieces: list[Piece], text_key: str, tokenizer_id: str, options: dict[str, Any]) -> str:
    """The key of a shard of ``pieces`` (a one-file shard keeps its first-version key)."""
    if len(pieces) == 1 and pieces[0].span is None:
        return shard_key(pieces[0].input, pieces[0].path, text_key, tokenizer_id, options)
    listed = [[p.input, *document_format(p.path), list(p.span) if p.span else None] for p in pieces]
    key = {"kind": KIND_PIECES, "pieces": listed, "text_key": text_key, "tokenizer": tokenizer_id, "options": options}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()


def shard_label(pieces: list[Piece]) -> str:
    """A shard for people: its file, its range, or its first file and how many more."""
    return pieces[0].label() if len(pieces) == 1 else f"{pieces[0].path} (+{len(pieces) - 1} more files)"


def shard_dir(store: str, key: str) -> str:
    return f"{store.rstrip('/')}/{key[:2]}/{key}"


def plan(
    paths: list[str], store: str, text_key: str, tokenizer_id: str, options: dict[str, Any], shard_bytes: int = 0
) -> list[Shard]:
    """The shards of ``paths``, in order (each file's identity read here, ``LOOKUPS`` at a time: a local file is
    hashed, an object's metadata read), cut by ``shard_bytes`` (``marinbuild.ml.shard_plan``; 0: a shard per
    file)."""
    with ThreadPoolExecutor(LOOKUPS) as pool:
        files = list(pool.map(lambda path: file_pieces(path, *input_info(path), shard_bytes), paths))
    shards = []
    for index, pieces in enumerate(group(files, shard_bytes)):
        key = pieces_key(pieces, text_key, tokenizer_id, options)
        shards.append(Shard(index, shard_label(pieces), key, shard_dir(store, key), tuple(pieces)))
    return shards


def is_done(shard: Shard) -> bool:
    fs, p = fsspec.core.url_to_fs(action_cache.record_path(shard.dir, shard.key))
    return bool(fs.exists(p))


def read_result(shard: Shard) -> ShardResult:
    with fsspec.open(f"{shard.dir}/{SHARD_FILE}", "r") as f:
        return ShardResult(**json.load(f))


def clear_leftovers(shard: Shard) -> None:
    """Remove what killed attempts left in a shard without a record: entries older than ``LEFTOVER_AGE``
    (younger ones may be another build's attempt at the same shard, still running)."""
    fs, p = fsspec.core.url_to_fs(shard.dir)
    fs.makedirs(p, exist_ok=True)
    now = time.time()
    try:
        entries = fs.ls(p, detail=True)
    except FileNotFoundError:  # an object store has no empty folder: nothing left over
        return
    for info in entries:
        modified = mtime_from_info(info)
        if modified is not None and now - modified > LEFTOVER_AGE:
            fs.rm(info["name"], recursive=True)


def commit(shard: Shard, result: ShardResult) -> None:
    """``shard.json``, then the action record: the shard is done once the record exists."""
    with fsspec.open(f"{shard.dir}/{SHARD_FILE}", "w") as f:
        json.dump(result.to_json(), f, indent=2)
    key = action_cache.ActionKey(shard.key, f"tokenize shard {shard.path}")
    action_cache.write_record(action_cache.new_record(shard.dir, key, None, socket.gethostname()))
