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


def write_then_fill_the_disk(config: pl.WriteConfig) -> dict:
    """Write the step's output, then leave the process no room: on the output's file system (a small tmpfs) by
    filling it, elsewhere by a file size limit of 8 bytes (``RLIMIT_FSIZE``: room for a status word, not for a
    record; the process must ignore SIGXFSZ). The commit that follows cannot write its records."""
    import errno
    import resource

    result = pl.write_text(config)
    if os.environ.get("MARINBUILD_FILL_DISK"):
        with open(os.path.join(config.output_path, "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    else:
        resource.setrlimit(resource.RLIMIT_FSIZE, (8, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return result
