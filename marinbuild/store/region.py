"""The region guard: a step does not read a large ``gs://`` path from another region than its worker's.

Marin's rule (``rigging.filesystem``): reads across regions cost egress and time, so past a budget
(``$MARIN_MIRROR_BUDGET_GB``, 10 GB by default) they fail; the fix is ``mirrored(...)`` (the path is read as
``mirror://``, copied once into the worker's region) or ``MARIN_I_WILL_PAY_FOR_ALL_FEES=1``. Marin checks the bytes as a
step reads them; this guard checks before the step starts, from its resolved config: every ``gs://`` string in it whose
bucket is in another region and whose object or folder holds more than the budget fails the step with one line, before
anything is read. Own code, not rigging's: rigging is an optional extra, and its bucket lookup goes through
google-cloud-storage, where this one asks gcsfs (the store's own client, with its retries and timeouts).

The worker's region is ``$MARINBUILD_REGION``, else the GCE metadata server's zone on a Google VM; unknown
(a laptop, a CI runner), the guard does nothing. Bucket locations are cached per process."""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

OVERRIDE_ENV = "MARIN_I_WILL_PAY_FOR_ALL_FEES"
BUDGET_ENV = "MARIN_MIRROR_BUDGET_GB"
REGION_ENV = "MARINBUILD_REGION"
_MULTI_REGIONS = {"us": ("us-",), "eu": ("europe-", "eu-"), "asia": ("asia-",)}


class CrossRegionReadError(RuntimeError):
    """A step's config names a large ``gs://`` path in another region than its worker's."""


@functools.cache
def worker_region() -> str | None:
    """This machine's GCP region (``us-central2``), or None when it cannot be told (module docstring)."""
    if os.environ.get(REGION_ENV):
        return os.environ[REGION_ENV].lower()
    try:
        with open("/sys/class/dmi/id/product_name") as f:
            if "Google" not in f.read():
                return None
        import urllib.request

        url = "http://metadata.google.internal/computeMetadata/v1/instance/zone"
        request = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
        with urllib.request.urlopen(request, timeout=2) as answer:
            return str(answer.read().decode().rsplit("/", 1)[-1].rsplit("-", 1)[0]) or None
    except (OSError, ValueError):
        return None


def same_region(region: str, location: str) -> bool:
    """``location`` (a bucket's: ``us-central2``, or a multi-region ``us``/``eu``/``asia``) serves ``region``."""
    location = location.lower()
    return region == location or any(region.startswith(p) for p in _MULTI_REGIONS.get(location, ()))


@functools.cache
def bucket_location(bucket: str) -> str:
    from marinbuild.store import gcs  # lazy: gcsfs

    return str(gcs.filesystem().info(bucket)["location"]).lower()


def gcs_paths(value: Any, key: str = "") -> list[tuple[str, str]]:
    """``(where, gs://...)`` for every ``gs://`` string inside a resolved config (dicts, lists, dataclasses)."""
    if isinstance(value, str):
        return [(key or "config", value)] if value.startswith("gs://") else []
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list | tuple | set | frozenset):
        return [p for i, v in enumerate(value) for p in gcs_paths(v, f"{key}[{i}]")]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [(f.name, getattr(value, f.name)) for f in dataclasses.fields(value)]
    else:
        return []
    return [p for k, v in items for p in gcs_paths(v, f"{key}.{k}" if key else str(k))]


def check_reads(config: Any) -> None:
    """Raise ``CrossRegionReadError`` if ``config`` names a ``gs://`` path in another region than this worker's
    holding more than the budget (module docstring); nothing when the region is unknown or the override is set."""
    region = worker_region()
    if region is None or os.environ.get(OVERRIDE_ENV):
        return
    budget = float(os.environ.get(BUDGET_ENV) or 10) * 1024**3
    for where, path in dict.fromkeys(gcs_paths(config)):
        bucket = path[len("gs://") :].split("/", 1)[0]
        location = bucket_location(bucket)
        if same_region(region, location):
            continue
        from marinbuild.store import gcs

        size = gcs.filesystem().du(path)  # 0 for a path that does not exist (yet): an empty listing
        if size > budget:
            raise CrossRegionReadError(
                f"{where}: {path} is in {location} and this worker in {region}: reading its {size:,} bytes "
                f"would cross regions (more than ${BUDGET_ENV}, {budget / 1024**3:g} GB); read it through "
                f"mirrored(...) (mirror://, copied once into {region}), or set {OVERRIDE_ENV}=1 to pay for it"
            )
