"""Marin's run info JSON: ``<base>/<script>-<hash>.json``, the file Marin's data browser reads for a run.

What it holds (Marin's schema): ``worker_id``, ``git_commit``, ``caller_path``, ``created_date``, ``user``,
``prefix`` and ``steps``, each step the object its ``.executor_info`` holds (without ``description``). The name's
``<hash>`` is Marin's: the first 6 hex digits of the md5 of ``json.dumps(step_infos, sort_keys=True)``.

Contract:
- ``step_pieces(info, version)`` is one step's compact sorted-key JSON as byte pieces: exactly the text Marin hashes
  for the name, and the step's line in the file. The version (most of the text: it nests the dependencies' versions)
  is passed through as it is, never decoded, copied or re-encoded.
- ``write(base, script, head, steps, only_if_new)`` streams the file in ONE pass over ``steps`` (an iterable of
  each step's pieces), hashing what it writes, and returns the path. Nothing is held whole in memory: a graph of
  100,000 steps has a run info of over a gigabyte.
- A crash (a kill at any moment) never loses or tears an existing run info: the text goes to a temporary file
  (``.tmp-<script>.json.<random>`` beside the final one; a killed writer leaves it behind), then one
  ``os.replace`` names it, once its hash is known. With ``only_if_new`` an existing file of the same name (the
  same graph, an earlier run) is kept and the temporary file dropped. On an object store the text is spooled to
  a local temporary file and uploaded as one object, which appears whole.
- ``name(script, steps)`` is the path's file name without writing anything (a second pass when needed);
  ``find_local(base, script, steps)`` finds the file an earlier run of the same steps wrote, and where each entry
  lies in it.
- ``BackgroundWrite`` writes it on a thread of its own, so a build does not wait for it before starting its
  steps: hashing and writing release the GIL; ``result()`` joins and re-raises what the writer raised, ``join()``
  only waits (when the build has an error of its own to raise).

Why streamed and on a thread: every run that runs a step has a new graph, so a new file; its size follows the
whole graph (each step's version nests its dependencies' up to four levels deep), not the steps that ran.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, BinaryIO

from marinbuild.core.jsonenc import dumps_sorted, json_str
from marinbuild.store import faults, fs

Pieces = Sequence[bytes]
"""One step's text, as pieces to write one after the other."""

HEAD_KEYS = ("worker_id", "git_commit", "caller_path", "created_date", "user", "prefix")
"""The top-level keys before ``steps``, in Marin's order."""


def step_pieces(info: Any, version: Pieces) -> Pieces:
    """``json.dumps(asdict(info) without description, sort_keys=True)`` of an ``ExecutorStepInfo``, with
    ``version`` (the step's version string as byte pieces, ``VersionTable.version_pieces``) in place."""
    override = info.override_output_path
    head = (
        '{"config": '
        + dumps_sorted(info.config)
        + ', "dependencies": '
        + dumps_sorted(info.dependencies)
        + ', "fn_name": '
        + json_str(info.fn_name)
        + ', "name": '
        + json_str(info.name)
        + ', "output_path": '
        + json_str(info.output_path)
        + ', "override_output_path": '
        + ("null" if override is None else dumps_sorted(override))
        + ', "version": '
    )
    return (head.encode(), *version, b"}")


def script_name(caller_path: str) -> str:
    """``<script>`` of the name: the caller's file name without ``.py`` (as Marin strips it)."""
    return os.path.basename(caller_path).replace(".py", "")


def name(script: str, steps: Iterable[Pieces]) -> str:
    """The file name ``<script>-<hash>.json`` of a run info with these steps (hashing only)."""
    digest = hashlib.md5(b"[")
    for i, pieces in enumerate(steps):
        if i:
            digest.update(b", ")
        for piece in pieces:
            digest.update(piece)
    digest.update(b"]")
    return f"{script}-{digest.hexdigest()[:6]}.json"


def opening(head: dict[str, Any]) -> bytes:
    """The text before the first step: Marin's ``indent=2`` top level, up to ``"steps": [``."""
    ordered = {key: head.get(key) for key in HEAD_KEYS}
    return (json.dumps(ordered, indent=2)[:-2] + ',\n  "steps": [\n').encode()


def _stream(
    out: BinaryIO,
    head: dict[str, Any],
    steps: Iterable[Pieces],
    spans: list[tuple[int, int]] | None,
    states: list[tuple[int, bytes]] | None = None,
) -> str:
    """Write the whole text to ``out``; return the md5 hex digest of the steps' list (the name's hash). ``spans``
    (when given) gets each step's entry as (offset, length) in the text; ``states`` (when given) the md5 states a
    later splice of the file resumes from (``run_info_splice.EntryHasher``)."""
    from marinbuild.store.run_info_splice import STATE_EVERY, EntryHasher

    hasher = EntryHasher(STATE_EVERY if states is not None else 0)
    opening_text = opening(head)
    out.write(opening_text)
    at = len(opening_text)
    for i, pieces in enumerate(steps):
        if i:
            out.write(b",\n    ")
            at += 6
        else:
            out.write(b"    ")
            at += 4
        hasher.add_pieces(i, pieces)
        size = sum(len(piece) for piece in pieces)
        out.writelines(pieces)
        if spans is not None:
            spans.append((at, size))
        at += size
    out.write(b"\n  ]\n}\n")
    if states is not None:
        states.extend(hasher.states)
    return hasher.hexdigest()


def write(
    base: str,
    script: str,
    head: dict[str, Any],
    steps: Iterable[Pieces],
    only_if_new: bool,
    spans: list[tuple[int, int]] | None = None,
    states: list[tuple[int, bytes]] | None = None,
) -> str:
    """Write the run info under ``base`` (a local folder or an fsspec URL) in one pass; return its path. ``spans``
    gets each step's entry as (offset, length) in the file (an existing file kept by ``only_if_new`` has the same
    text but for its head: its spans are not given, and ``spans`` is left empty); ``states``, for a local file,
    the md5 states a later splice resumes from (``run_info_splice``)."""
    if fs.is_local(base):
        return _write_local(fs.local_path(base), script, head, steps, only_if_new, spans, states)
    import tempfile

    with tempfile.TemporaryFile() as spool:
        md5 = _stream(spool, head, steps, spans)
        path = fs.join(base, f"{script}-{md5[:6]}.json")
        if only_if_new and fs.exists(path):
            if spans is not None:
                spans.clear()
            return path
        spool.seek(0)
        faults.point("before-upload run info " + script)
        with fs.filesystem_for(path).open(path, "wb") as remote:
            while chunk := spool.read(1 << 22):
                remote.write(chunk)
    return path


def _write_local(
    base: str,
    script: str,
    head: dict[str, Any],
    steps: Iterable[Pieces],
    only_if_new: bool,
    spans: list[tuple[int, int]] | None,
    states: list[tuple[int, bytes]] | None,
) -> str:
    os.makedirs(base, exist_ok=True)
    fd, tmp = fs.create_temporary(base, script + ".json")
    try:
        with os.fdopen(fd, "wb") as out:
            md5 = _stream(out, head, steps, spans, states)
        path = os.path.join(base, f"{script}-{md5[:6]}.json")
        if only_if_new and os.path.exists(path):
            os.unlink(tmp)
            if spans is not None:
                spans.clear()  # the kept file's head may differ in length: its offsets are not these
            return path
        faults.point("before-replace run info " + script)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def find_local(
    base: str, script: str, steps: Iterable[Pieces]
) -> tuple[str, list[tuple[int, int]], list[tuple[int, bytes]]] | None:
    """The run info ``write`` would name for ``steps`` in local folder ``base``, if an earlier run wrote it, with each
    entry's (offset, length) there and the md5 states a later splice resumes from (``run_info_splice``); None if
    there is none, or it does not hold these entries (checked by the full md5 of its entries, not only the six hex
    digits of its name)."""
    from marinbuild.store.run_info_splice import STATE_EVERY, EntryHasher

    digest = hashlib.md5(b"[")
    lengths: list[int] = []
    for i, pieces in enumerate(steps):
        if i:
            digest.update(b", ")
        size = 0
        for piece in pieces:
            digest.update(piece)
            size += len(piece)
        lengths.append(size)
    digest.update(b"]")
    expected = digest.hexdigest()
    path = os.path.join(base, f"{script}-{expected[:6]}.json")
    marker = b'"steps": [\n'
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
            at = head.find(marker)
            if at < 0:
                return None
            at += len(marker)
            spans: list[tuple[int, int]] = []
            found = EntryHasher(STATE_EVERY)
            for i, size in enumerate(lengths):
                at += 6 if i else 4
                f.seek(at)
                found.add(i, f.read(size))
                spans.append((at, size))
                at += size
            if found.hexdigest() != expected or at + 7 != os.fstat(f.fileno()).st_size:
                return None
    except OSError:
        return None
    return path, spans, found.states


class BackgroundWrite:
    """``write`` (or any function returning the path) on a thread of its own; ``result()`` waits for it."""

    def __init__(self, work: Callable[[], str]):
        self._work = work
        self._path: str | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="marinbuild-run-info", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._path = self._work()
        except BaseException as exc:  # handed to whoever waits for the result
            self._error = exc

    def join(self) -> None:
        """Wait for the writer, whatever it did."""
        self._thread.join()

    def result(self) -> str:
        """The path written; raises what the writer raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._path is not None
        return self._path
