"""``lease_for``: the lease implementation for the filesystem a step's output lives on: ``lease_local`` (flock and an
atomic create) for local folders, ``lease_gcs`` (generation preconditions) for ``gs://``. The choice lives above the
interface and its implementations so nothing imports back; ``lease_gcs`` (gcsfs) is imported only for a ``gs://`` path.
"""

from __future__ import annotations

from marinbuild.store import fs
from marinbuild.store.lease import STALE_AFTER, Lease
from marinbuild.store.lease_local import LocalFileLease


def lease_for(output_path: str, worker_id: str, stale_after: float = STALE_AFTER) -> Lease:
    if fs.is_local(output_path):
        return LocalFileLease(fs.local_path(output_path), worker_id, stale_after)
    protocol = output_path.split("://", 1)[0]
    if protocol in ("gs", "gcs"):
        from marinbuild.store.lease_gcs import GCSLease  # lazy: gcsfs

        return GCSLease(output_path, worker_id, stale_after)
    raise ValueError(
        f"no lease implementation for {protocol}:// prefixes; use a local folder or a gs:// prefix "
        f"(leases need an atomic create-if-absent, which {protocol}:// does not offer here)"
    )
