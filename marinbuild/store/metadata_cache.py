"""A local cache of finished steps on remote prefixes: what was verified, at which status generation.

A SUCCESS status is immutable unless deleted (a rebuild writes a new object generation), so
once this machine has seen ``<output>/.executor_status`` say SUCCESS at generation G, with the
action-cache records D1..Dn beside it, that stays true for as long as the status object is still
at generation G. Revalidating an entry therefore needs only the status object's generation,
which every status read returns anyway; the records need not be listed again. Nothing here is
authoritative: a missing or mismatching entry means "ask the store", and another machine's
builds (with its own cache) are always seen because the status is always read.

The cache is one sqlite file: ``$MARINBUILD_METADATA_CACHE`` if set (``off`` disables it), else
the one of the workspace a build runs in (``.marinbuild/metadata.sqlite``), else
``~/.cache/marinbuild/metadata.sqlite`` (``default_path``). Each build opens its own
``MetadataCache`` (``marinbuild.run.build_context``); sqlite serialises the writers. A damaged
cache file is set aside with a warning naming it and rebuilt: it only ever saves requests.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite3

logger = logging.getLogger("marinbuild")

ENV = "MARINBUILD_METADATA_CACHE"
_SCHEMA = """CREATE TABLE IF NOT EXISTS steps (
    output_path TEXT PRIMARY KEY,
    status_generation INTEGER NOT NULL,
    digests TEXT NOT NULL,
    recorded REAL NOT NULL
)"""
_BATCH = 500


@dataclass(frozen=True)
class CachedStep:
    status_generation: int
    digests: frozenset[str]


class MetadataCache:
    """Entries by output path; ``path=None`` is a cache that remembers nothing."""

    def __init__(self, path: str | None):
        self.path = path
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    def _connect(self) -> sqlite3.Connection | None:
        import sqlite3

        if self.path is None:
            return None
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        for attempt in range(2):
            try:
                conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA)
                self._conn, self._pid = conn, os.getpid()
                return conn
            except sqlite3.DatabaseError as exc:
                if attempt:
                    raise
                self._set_aside(exc)
        return None

    def _set_aside(self, exc: Exception) -> None:
        assert self.path is not None
        aside = f"{self.path}.damaged-{int(time.time())}"
        logger.warning("metadata cache %s is damaged (%s); moved to %s and starting a new one", self.path, exc, aside)
        self._conn = None
        for suffix in ("", "-wal", "-shm"):
            try:
                os.replace(self.path + suffix, aside + suffix)
            except FileNotFoundError:
                pass

    def _run(self, fn: Any, *args: Any) -> Any:
        import sqlite3

        with self._lock:
            for attempt in range(2):
                conn = self._connect()
                if conn is None:
                    return None
                try:
                    return fn(conn, *args)
                except sqlite3.OperationalError as exc:
                    if "locked" in str(exc) or "busy" in str(exc):
                        logger.debug("metadata cache %s busy: %s", self.path, exc)
                        return None  # another process holds it: this time, do without
                    raise
                except sqlite3.DatabaseError as exc:
                    if attempt:
                        raise
                    self._set_aside(exc)
        return None

    def lookup(self, output_paths: Iterable[str]) -> dict[str, CachedStep]:
        paths = list(dict.fromkeys(output_paths))

        def query(conn: sqlite3.Connection) -> dict[str, CachedStep]:
            found: dict[str, CachedStep] = {}
            for i in range(0, len(paths), _BATCH):
                chunk = paths[i : i + _BATCH]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT output_path, status_generation, digests FROM steps WHERE output_path IN ({marks})", chunk
                )
                for path, generation, digests in rows:
                    found[path] = CachedStep(int(generation), frozenset(d for d in digests.split(",") if d))
            return found

        return (self._run(query) or {}) if paths else {}

    def record(self, entries: Mapping[str, CachedStep]) -> None:
        if not entries:
            return
        now = time.time()
        rows = [(p, e.status_generation, ",".join(sorted(e.digests)), now) for p, e in entries.items()]

        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("BEGIN")
                conn.executemany("INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?)", rows)

        self._run(write)

    def close(self) -> None:
        """Close the connection (a later use opens it again)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None and self._pid == os.getpid():
            conn.close()

    def forget(self, output_paths: Iterable[str]) -> None:
        rows = [(p,) for p in output_paths]
        if not rows:
            return

        def delete(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute("BEGIN")
                conn.executemany("DELETE FROM steps WHERE output_path = ?", rows)

        self._run(delete)

    def __len__(self) -> int:
        def count(conn: sqlite3.Connection) -> int:
            return int(conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0])

        return int(self._run(count) or 0)


def default_path(workspace_cache_dir: str | os.PathLike[str] | None = None) -> str | None:
    """Where the cache lives: ``$MARINBUILD_METADATA_CACHE`` (None if it says ``off``), else in
    ``workspace_cache_dir`` when given, else in the user's cache folder."""
    env = os.environ.get(ENV)
    if env is not None:
        return None if env.strip().lower() in ("", "off", "0", "none") else env
    if workspace_cache_dir is not None:
        return os.path.join(workspace_cache_dir, "metadata.sqlite")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "marinbuild", "metadata.sqlite")
