"""The file view's rules: which paths under the prefix may be read, and how much of them.

``read_text(prefix, relative)`` reads the file or raises ``Refused`` with the HTTP status: 400 for an absolute path, a
``..`` component, a NUL byte or a folder; 403 for a real location (symlinks resolved) outside the prefix; 404 missing;
413 above ``MAX_BYTES``; 415 not UTF-8. The check and the read use the resolved path, so a symlink swapped in between
cannot redirect the read."""

from __future__ import annotations

import os
import stat as stat_module

MAX_BYTES = 1 << 20


class Refused(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def check_relative(relative: str) -> list[str]:
    """The components of ``relative``; Refused(400) for an absolute path, ``..`` or a NUL byte."""
    if "\x00" in relative:
        raise Refused(400, "a NUL byte in the path")
    if relative.startswith(("/", "\\")) or "://" in relative or (len(relative) > 1 and relative[1] == ":"):
        raise Refused(400, f"absolute path refused: {relative!r} (paths are relative to the prefix)")
    parts = [p for p in relative.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        raise Refused(400, f"'..' refused in {relative!r}: only files inside the prefix are shown")
    return parts


def resolve(prefix: str, relative: str) -> str:
    parts = check_relative(relative)
    if "://" in prefix:
        return prefix.rstrip("/") + "/" + "/".join(parts)
    root = os.path.realpath(prefix)
    real = os.path.realpath(os.path.join(prefix, *parts))
    if real != root and not real.startswith(root.rstrip(os.sep) + os.sep):
        raise Refused(403, f"{relative!r} leads outside the prefix (a symlink to {real}): refused")
    return real


def read_text(prefix: str, relative: str) -> str:
    path = resolve(prefix, relative)
    if "://" in path:
        return _read_remote(path, relative)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        raise Refused(404, f"no file {relative!r} under the prefix") from None
    except IsADirectoryError:
        raise Refused(400, f"{relative!r} is a folder, not a file") from None
    except OSError as exc:
        raise Refused(403, f"cannot read {relative!r}: {exc.strerror}") from None
    stat = os.fstat(fd)
    if not stat_module.S_ISREG(stat.st_mode):
        os.close(fd)
        raise Refused(400, f"{relative!r} is a folder, not a file")
    with os.fdopen(fd, "rb") as f:
        size = stat.st_size
        if size > MAX_BYTES:
            raise Refused(413, _too_large(relative, size))
        data = f.read(MAX_BYTES + 1)
    return _decode(data, relative)


def _read_remote(path: str, relative: str) -> str:
    import fsspec

    fs, stripped = fsspec.core.url_to_fs(path)
    try:
        info = fs.info(stripped)
    except FileNotFoundError:
        raise Refused(404, f"no file {relative!r} under the prefix") from None
    if info.get("type") == "directory":
        raise Refused(400, f"{relative!r} is a folder, not a file")
    size = int(info.get("size") or 0)
    if size > MAX_BYTES:
        raise Refused(413, _too_large(relative, size))
    return _decode(fs.cat_file(stripped), relative)


def _too_large(relative: str, size: int) -> str:
    return f"{relative!r} is {size:,} bytes: only files up to {MAX_BYTES:,} bytes are shown"


def _decode(data: bytes, relative: str) -> str:
    if len(data) > MAX_BYTES:
        raise Refused(413, _too_large(relative, len(data)))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused(415, f"{relative!r} is not UTF-8 text: not shown") from None
