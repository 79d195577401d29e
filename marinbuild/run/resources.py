"""What this machine has, and whether the backend can give a step what it asks for.

A step's request is ``marinbuild.core.resources.Resources`` (pure data); this module holds the
machine-facing side: the TPU chips and GPUs of this machine (counted by their device files, no driver
call), ``check_local`` (why the local backend cannot run a request: TPUs or GPUs this machine does not
have, or a multi-host slice), so a build refuses before running anything, and the error it refuses with.
"""

from __future__ import annotations

import glob
from typing import Any

from marinbuild.core.resources import normalize

__all__ = ["UnsatisfiableResourcesError", "check_local", "local_gpus", "local_tpu_chips"]


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
    """Why a step with this request cannot run on this machine's local backend (None if it can).

    ``tpu_chips`` and ``gpus`` are the machine's accelerators; None counts this machine's
    (``local_tpu_chips``, ``local_gpus``). Passing them asks about another machine (a TPU VM).
    """
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
