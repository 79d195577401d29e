"""``lease_for``: the lease implementation for the filesystem a step's output lives on.

Local folders get ``lease_local`` (flock and an atomic create), ``gs://`` prefixes get ``lease_gcs``
(object generation preconditions); both implement ``lease.Lease``. The choice lives here, above the
interface and its implementations, so that each implementation imports the interface and nothing
imports back. ``lease_gcs`` is imported only for a ``gs://`` path: it brings in gcsfs, which a local
build never needs.
"""

from __future__ import annotations

from marinbuild.store import fs
from marinbuild.store.lease import STALE_AFTER, Lease
from marinbuild.store.lease_local import LocalFileLease

__all__ = ["lease_for"]


def lease_for(output_path: str, worker_id: str, stale_after: float = STALE_AFTER) -> Lease:
    """The lease on ``output_path`` for ``worker_id``, by the filesystem it lives on."""
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
