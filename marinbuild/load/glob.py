"""``glob()``: the source files of a package that match patterns (relative to the package folder, with ``/``). ``*`` and
``?`` match within a path segment, ``[abc]`` a character class, a ``**`` segment any number of them; wildcards do not
match a leading ``.`` unless the pattern segment has one. Results are files only, sorted; sub-packages, hidden, tool
(``workspace.is_skipped_dir``) and symlinked folders are not entered."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from marinbuild.load.workspace import BUILD_FILE, is_skipped_dir

_ANY_SEGMENTS = r"(?:(?!\.)[^/]+/)*"


class GlobPatternError(ValueError):
    """A glob pattern is malformed."""


def _segment_regex(segment: str) -> str:
    out = [] if segment.startswith(".") else [r"(?!\.)"]
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append(r"[^/]*")
        elif ch == "?":
            out.append(r"[^/]")
        elif ch == "[":
            end = segment.find("]", i + 2 if segment[i + 1 : i + 2] in ("!", "]") else i + 1)
            if end < 0:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 : end]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


@lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regex matching the package-relative paths selected by ``pattern``."""
    if not isinstance(pattern, str) or pattern == "":
        raise GlobPatternError(f"invalid glob pattern {pattern!r}: empty pattern")
    if "\\" in pattern:
        raise GlobPatternError(f"invalid glob pattern {pattern!r}: use '/' rather than backslashes")
    if pattern.startswith("/"):
        raise GlobPatternError(f"invalid glob pattern {pattern!r}: patterns are relative to the package folder")
    segments = pattern.split("/")
    parts: list[str] = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment in ("", ".", ".."):
            raise GlobPatternError(f"invalid glob pattern {pattern!r}: empty, '.' or '..' segment")
        if segment == "**":
            parts.append(_ANY_SEGMENTS + (r"(?!\.)[^/]+" if last else ""))
        elif "**" in segment:
            raise GlobPatternError(f"invalid glob pattern {pattern!r}: '**' must be a whole path segment")
        else:
            parts.append(_segment_regex(segment) + ("" if last else "/"))
    return re.compile("".join(parts) + r"\Z")


def list_package_files(package_dir: Path) -> list[str]:
    """Package-relative paths of the package's files (not its BUILD.marin, nor sub-packages' files), sorted."""
    files: list[str] = []
    root = str(package_dir)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath != root and BUILD_FILE in filenames:
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if not is_skipped_dir(d)]
        rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
        if rel == ".":
            files.extend(name for name in filenames if name != BUILD_FILE)
        else:
            files.extend(f"{rel}/{name}" for name in filenames)
    files.sort()
    return files


def glob_files(files: Iterable[str], include: Iterable[str], exclude: Iterable[str] = ()) -> list[str]:
    """The sorted ``files`` matching any ``include`` pattern and no ``exclude`` pattern."""
    inc = [compile_glob(p).match for p in include]
    exc = [compile_glob(p).match for p in exclude]
    return sorted(f for f in files if any(m(f) for m in inc) and not any(m(f) for m in exc))
