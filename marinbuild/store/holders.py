"""Worker ids of lease holders, and telling when a holder is provably gone.

A worker id is ``<host>-<pid>-<tag>``, ``tag`` 4 hex digits of a digest of the boot id and pid namespace, then 4 random.
A lease naming a holder of this host, boot and pid namespace whose process is gone may be taken at once
(``provably_gone``); of anything else (another machine or container, Marin's ids) the stale time decides."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache


@lru_cache(maxsize=1)
def host() -> str:
    return os.uname().nodename


@lru_cache(maxsize=1)
def namespace_tag() -> str:
    """4 hex digits naming this boot and pid namespace ("" where /proc does not tell them)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(f"{boot} {namespace}".encode()).hexdigest()[:4]


def new_worker_id() -> str:
    tag = namespace_tag() or os.urandom(2).hex()
    return f"{host()}-{os.getpid()}-{tag}{os.urandom(2).hex()}"


def provably_gone(worker_id: str) -> bool:
    """The holder named ``worker_id`` ran on this host, in this boot and pid namespace, and its process is gone."""
    parts = worker_id.rsplit("-", 2)
    if len(parts) != 3:
        return False
    name, pid, tag = parts
    ns = namespace_tag()
    if not ns or name != host() or len(tag) != 8 or tag[:4] != ns or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return False  # a runner of this very process
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's process: PermissionError)
        return False
    return False
