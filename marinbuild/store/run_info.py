"""Marin's run info JSON ``<base>/<script>-<hash>.json``: the record of one run, which Marin's data browser and
``marinbuild serve`` read.

Marin's schema (``worker_id``, ``git_commit``, ``caller_path``, ``created_date``, ``user``, ``prefix``, ``steps``), each
step one line of compact sorted-key JSON. ``<hash>``: 6 hex digits of the md5 of the steps' sorted output paths relative
to the prefix (Marin hashes texts holding memory addresses, so its name changes every run anyway): known without
composing any entry, and the same for every run of the same graph under any prefix. ``write`` replaces the file
atomically."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from marinbuild.core.jsonenc import dumps_sorted
from marinbuild.store import fs

HEAD_KEYS = ("worker_id", "git_commit", "caller_path", "created_date", "user", "prefix")  # before steps, as Marin


def step_line(info: Any, version_str: str) -> str:
    """A step info's sorted JSON without description, its version as the step's version string (``version`` last)."""
    fields = {
        "config": info.config,
        "dependencies": info.dependencies,
        "fn_name": info.fn_name,
        "name": info.name,
        "output_path": info.output_path,
        "override_output_path": info.override_output_path,
    }
    return dumps_sorted(fields)[:-1] + ', "version": ' + version_str + "}"


def script_name(caller_path: str) -> str:
    """The caller's file name without ``.py``, or with ``python -m package`` the package's (``marinbuild``'s alike)."""
    if os.path.basename(caller_path) == "__main__.py":
        return os.path.basename(os.path.dirname(caller_path))
    return os.path.basename(caller_path).replace(".py", "")


def name(script: str, output_paths: Iterable[str], prefix: str) -> str:
    """``<script>-<hash>.json`` for the steps at these output paths under ``prefix`` (paths outside count whole)."""
    under = prefix.rstrip("/") + "/"
    relative = (path[len(under) :] if path.startswith(under) else path for path in output_paths)
    digest = hashlib.md5("\n".join(sorted(relative)).encode())
    return f"{script}-{digest.hexdigest()[:6]}.json"


def _text(head: dict[str, Any], lines: Iterable[str]) -> Iterator[bytes]:
    ordered = {key: head.get(key) for key in HEAD_KEYS}
    yield (json.dumps(ordered, indent=2)[:-2] + ',\n  "steps": [').encode()
    separator = b"\n    "
    for line in lines:
        yield separator + line.encode()
        separator = b",\n    "
    yield b"\n  ]\n}\n"


def write(path: str, head: dict[str, Any], lines: Iterable[str]) -> None:
    """Write the run info at ``path``: the ``HEAD_KEYS`` of ``head``, then ``lines``, streamed on a local disk."""
    fs.write_atomic_pieces(path, _text(head, lines))
