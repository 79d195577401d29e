"""The kill soak's step function: ``pipelines.write_text`` run while holding an exclusive flock named after the step.

Two live runners inside one step at once is the violation the leases exist to prevent: the second one cannot take
the flock and records the step in ``$MARINBUILD_SOAK_DIR/violations``. A killed runner's flock goes with it.
"""

from __future__ import annotations

import fcntl
import os

import pipelines as pl


def exclusive_write(config: pl.WriteConfig) -> dict:
    folder = os.environ.get("MARINBUILD_SOAK_DIR")
    if not folder:
        return pl.write_text(config)
    fd = os.open(os.path.join(folder, "lock-" + os.path.basename(config.output_path)), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            with open(os.path.join(folder, "violations"), "a") as f:
                f.write(f"{os.path.basename(config.output_path)} run by two live runners at once\n")
        return pl.write_text(config)
    finally:
        os.close(fd)
