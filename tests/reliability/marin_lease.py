"""Marin's local lease protocol, as ``rigging``/``iris`` ``LocalFileLease`` does it: a faithful transcription of its
read and conditional write, to show a marinbuild runner and a Marin runner exclude each other on one lease file.

Read: open, flock shared, read; empty means free. Write: open ``a+``, flock exclusive, read; a fresh record of
another worker means held (``FileExistsError``); else truncate and write its own record.
"""

from __future__ import annotations

import fcntl
import json
import os
import time

HEARTBEAT_TIMEOUT = 90


def read(lock_path: str) -> dict | None:
    try:
        with open(lock_path) as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            content = f.read()
            return json.loads(content) if content else None
    except FileNotFoundError:
        return None


def try_acquire(lock_path: str, worker_id: str) -> bool:
    """Marin's ``try_acquire``: False if a fresh lease of another worker is there, else write ours."""
    current = read(lock_path)
    if current and time.time() - current["timestamp"] <= HEARTBEAT_TIMEOUT and current["worker_id"] != worker_id:
        return False
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        f.seek(0)
        content = f.read()
        if content:
            held = json.loads(content)
            if time.time() - held["timestamp"] <= HEARTBEAT_TIMEOUT and held["worker_id"] != worker_id:
                return False
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"worker_id": worker_id, "timestamp": time.time()}))
    return True
