"""Writing a file of marinbuild's own under ``<workspace>/.marinbuild/`` atomically (the analysis snapshot).

``write_private_file`` makes the folder on first use with a ``.gitignore`` of ``*``, writes a
temporary file unique to this process and renames it over the target; it returns False when
the disk refuses (a cache that cannot be written only costs speed).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

__all__ = ["write_private_file"]

_SEQUENCE = itertools.count()
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


def write_private_file(target: Path, data: bytes) -> bool:
    """Atomically write a file of marinbuild's own under ``<workspace>/.marinbuild/`` (its folder made on first
    use, with a ``.gitignore`` of ``*``). False if the disk refuses: a cache that cannot be written only costs speed.

    Plain ``os`` calls on a temporary name unique to this process (no stat of the folder first, no
    random name, no buffered file object): a first load writes one of these per BUILD file.
    """
    tmp = os.path.join(target.parent, f".tmp-{os.getpid()}-{next(_SEQUENCE)}.bin")
    try:
        try:
            fd = os.open(tmp, _CREATE, 0o600)
        except FileNotFoundError:
            target.parent.mkdir(parents=True, exist_ok=True)
            (target.parent / ".gitignore").write_text("*\n")
            fd = os.open(tmp, _CREATE, 0o600)
    except OSError:  # also a name taken by a process of the same id on another host sharing the folder
        return False
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
        return False
    return True
