"""The machine-facing side of a step's request (``core.resources.Resources``): this machine's TPU chips and
GPUs (counted by their device files, no driver call), why the local backend cannot run a request, and the
error a build refuses with before running anything."""

from __future__ import annotations

import glob
from typing import Any

from marinbuild.core.resources import normalize


class UnsatisfiableResourcesError(ValueError):
    """Steps ask for resources the chosen backend cannot give; nothing was run."""


def local_tpu_chips() -> int:
    """TPU chips on this machine (as Ray counts them: /dev/accel* or /dev/vfio/<n>)."""
    accel = glob.glob("/dev/accel[0-9]*")
    return len(accel) if accel else len(glob.glob("/dev/vfio/[0-9]*"))


def local_gpus() -> int:
    """NVIDIA GPUs on this machine (device files; no driver call)."""
    return len(glob.glob("/dev/nvidia[0-9]*"))


def check_local(value: Any, *, tpu_chips: int | None = None, gpus: int | None = None) -> str | None:
    """Why this request cannot run on the local backend (TPUs, GPUs, a multi-host slice), or None."""
    res = normalize(value)
    if res is None:
        return None
    cluster_hint = (
        "run it on a Ray cluster that has one: `marinbuild --backend ray --ray_address ADDRESS ...` "
        "(infra/README.md sets one up)"
    )
    if res.multi_host:
        return f"needs {res.describe()}, which no single machine has; {cluster_hint}"
    if res.wants_tpu:
        have = local_tpu_chips() if tpu_chips is None else tpu_chips
        need = max(res.tpu_chips, 1)
        if have < need:
            what = f"{have} TPU chip{'s' if have != 1 else ''}" if have else "no TPU"
            return f"needs {res.describe()} but this machine has {what}; {cluster_hint}"
    if res.gpu:
        have = local_gpus() if gpus is None else gpus
        if have < res.gpu:
            what = f"{have} GPU{'s' if have != 1 else ''}" if have else "no GPU"
            return f"needs {res.describe()} but this machine has {what}; {cluster_hint}"
    return None
