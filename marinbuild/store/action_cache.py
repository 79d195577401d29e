"""Action-cache records: which version string an output path holds, by its full sha256.

An output path's 6 hex digits (24 bits) can collide between version strings of one step name. Each committed step leaves
``<output>/.marinbuild_action.<sha256 of its version string>.json`` (beside Marin's files) with the digest, step name
and output manifest (``store.manifest``; one file per commit, as creating files is a local commit's dearest operation).
The name carries the digest, so a listing tells which versions are where. A built path holding records only of other
digests raises ``ActionCacheCollisionError`` rather than use another version's outputs; with ``override_output_path`` it
is only logged (Marin's behaviour); a path with no record was built by Marin and is used as built."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from marinbuild.store import fs
from marinbuild.store.status import DamagedFileError

logger = logging.getLogger("marinbuild")

RECORD_PREFIX = ".marinbuild_action."
RECORD_SUFFIX = ".json"
FORMAT = "marinbuild-action/2"
FORMATS = ("marinbuild-action/1", FORMAT)  # read; /1 had no manifest inside


class ActionCacheCollisionError(Exception):
    """Two different version strings map to one output path (a 6-hex path-hash collision)."""


def version_digest(version_str: str | bytes) -> str:
    """The full-strength key of a version string (or of its ASCII bytes): its sha256, hex."""
    return hashlib.sha256(version_str.encode() if isinstance(version_str, str) else version_str).hexdigest()


@dataclass(frozen=True)
class ActionKey:
    """A step's identity for its commit and the plan (``overridden``: placed by ``override_output_path``)."""

    digest: str
    name: str
    overridden: bool = False

    @classmethod
    def of(cls, version_str: str | bytes, name: str, overridden: bool = False) -> ActionKey:
        return cls(version_digest(version_str), name, overridden)


@dataclass(frozen=True)
class ActionRecord:
    version_sha256: str
    name: str
    output_path: str
    manifest_digest: str | None
    files: int
    total_bytes: int
    worker_id: str
    created: float
    format: str = FORMAT
    manifest: dict[str, Any] | None = None  # ``Manifest.to_json``, written last: one file entry per line

    def encode(self) -> bytes:
        head = json.dumps({f: getattr(self, f) for f in self.__dataclass_fields__ if f != "manifest"})
        if self.manifest is None:
            return head.encode()
        body = json.dumps(self.manifest, separators=(",", ":")).replace('},{"path"', '},\n{"path"')
        return (head[:-1] + ', "manifest": ' + body + "}").encode()


def record_name(digest: str) -> str:
    return f"{RECORD_PREFIX}{digest}{RECORD_SUFFIX}"


def record_path(output_path: str, digest: str) -> str:
    return fs.join(output_path, record_name(digest))


def digest_of_name(name: str) -> str | None:
    """The digest in a record's file name, None if ``name`` is not a record."""
    if name.startswith(RECORD_PREFIX) and name.endswith(RECORD_SUFFIX):
        digest = name[len(RECORD_PREFIX) : -len(RECORD_SUFFIX)]
        if len(digest) == 64:
            return digest
    return None


def digests_at(output_path: str) -> frozenset[str]:
    if fs.is_local(output_path):
        try:
            names: Iterable[str] = [n for n in os.listdir(fs.local_path(output_path)) if n.startswith(RECORD_PREFIX)]
        except (FileNotFoundError, NotADirectoryError):
            names = []
    else:
        from marinbuild.store import gcs  # lazy: gcsfs

        if not output_path.startswith(("gs://", "gcs://")):
            return frozenset()
        bucket, key = gcs.split(output_path)
        items = gcs.run(gcs.list_objects, gcs.filesystem(), bucket, f"{key}/{RECORD_PREFIX}")
        names = (item.name.rsplit("/", 1)[-1] for item in items)
    return digests_named(names)


def digests_named(names: Iterable[str]) -> frozenset[str]:
    return frozenset(d for d in map(digest_of_name, names) if d is not None)


def read_record(output_path: str, digest: str) -> ActionRecord | None:
    path = record_path(output_path, digest)
    data = fs.read_bytes(path)
    if data is None:
        return None
    try:
        obj = json.loads(data)
        if obj.get("format") not in FORMATS:
            raise ValueError(obj.get("format"))
        return ActionRecord(**{k: obj[k] for k in ActionRecord.__dataclass_fields__ if k in obj})
    except (ValueError, TypeError, KeyError, AttributeError):
        raise DamagedFileError(path, "action-cache record is not the JSON marinbuild writes") from None


def write_record(record: ActionRecord) -> None:
    """Written atomically before SUCCESS; its name carries the digest, which is what collision checks read."""
    fs.write_atomic(record_path(record.output_path, record.version_sha256), record.encode())


def remove_record(output_path: str, digest: str) -> None:
    fs.remove(record_path(output_path, digest))


def new_record(output_path: str, key: ActionKey, manifest: Any, worker_id: str) -> ActionRecord:
    """The record of a commit; ``manifest`` is the ``Manifest`` of the outputs (None: none, e.g. in tests)."""
    body = manifest.to_json() if manifest is not None else None
    return ActionRecord(
        version_sha256=key.digest,
        name=key.name,
        output_path=output_path,
        manifest_digest=body["digest"] if body is not None else None,
        files=len(body["files"]) if body is not None else 0,
        total_bytes=body["total_bytes"] if body is not None else 0,
        worker_id=worker_id,
        created=time.time(),
        manifest=body,
    )


def _collision(output_path: str, key_digest: str, name: str, others: Iterable[str]) -> ActionCacheCollisionError:
    theirs = ", ".join(sorted(d[:16] for d in others))
    return ActionCacheCollisionError(
        f"output path collision at {output_path}: step {name} has version sha256 {key_digest[:16]}..., but the "
        f"path holds outputs of a different version string (sha256 {theirs}...). Two versions hash to the same "
        f"6-hex path; rename the step or set override_output_path to separate them"
    )


def check_before_commit(output_path: str, key: ActionKey, names: Iterable[str] | None = None) -> None:
    """Before recording ``key`` at ``output_path``: fail on a collision; drop stale records of an overridden path.
    ``names``: the file names directly in ``output_path``, if the caller listed them already."""
    recorded = digests_at(output_path) if names is None else digests_named(names)
    others = recorded - {key.digest}
    if not others:
        return
    if not key.overridden:
        raise _collision(output_path, key.digest, key.name, others)
    for digest in others:
        logger.warning(
            "%s: replacing the record of another version (sha256 %s...) at the overridden path %s",
            key.name,
            digest[:16],
            output_path,
        )
        remove_record(output_path, digest)


def check_built(built: Iterable[tuple[str, ActionKey]], known: Mapping[str, frozenset[str]] | None = None) -> None:
    """Raise ``ActionCacheCollisionError`` if a built path holds another version (``known``: listed digests by path)."""
    for output_path, key in built:
        digests = known.get(output_path) if known is not None else None
        if digests is None:
            if "://" not in output_path and os.path.exists(f"{output_path}/{RECORD_PREFIX}{key.digest}{RECORD_SUFFIX}"):
                continue  # the common local case: one stat
            digests = digests_at(output_path)
        if not digests or key.digest in digests:
            continue  # ours, or built by Marin (no records): used as built
        if key.overridden:
            logger.warning(
                "%s: %s was built from a different version (override_output_path); using it as built",
                key.name,
                output_path,
            )
            continue
        raise _collision(output_path, key.digest, key.name, digests)
