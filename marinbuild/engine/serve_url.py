"""The base URL of the web view that builds print and ``get_experiment_url()`` returns (no server import).

``$MARINBUILD_SERVE_URL``, else ``[tool.marinbuild] serve_url``, else the newest live ``marinbuild serve`` of this
workspace showing the build's prefix (``.marinbuild/serve/<pid>.json``). A CLI build exports it for the scripts it runs.
A step's page is ``<base>/step/<output path relative to the prefix>``, a run info's ``<base>/experiment?path=<its
path>`` (Marin's data browser's form)."""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

ENV = "MARINBUILD_SERVE_URL"
RECORDS = "serve"
"""``.marinbuild/serve/<pid>.json``: ``{"pid", "url", "prefix"}`` of each running server of the workspace."""


def serve_url(
    cache_dir: str | os.PathLike[str] | None = None, config: dict[str, Any] | None = None, prefix: str | None = None
) -> str | None:
    """The base URL, without a trailing slash; None if there is none. ``prefix``: a running server must show it."""
    value = os.environ.get(ENV) or (config or {}).get("serve_url")
    if isinstance(value, str) and value:
        return value.rstrip("/")
    return running_url(cache_dir, prefix) if cache_dir is not None else None


def running_url(cache_dir: str | os.PathLike[str], prefix: str | None = None) -> str | None:
    """The URL the newest live ``marinbuild serve`` of this workspace (showing ``prefix``, if given) recorded."""
    folder = Path(cache_dir) / RECORDS
    try:
        records = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    for path in records:
        try:
            record = json.loads(path.read_text())
            pid, url = int(record["pid"]), str(record["url"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if prefix is not None and record.get("prefix") != prefix:
            continue
        if _alive(pid):
            return url.rstrip("/")
    return None


def record_path(cache_dir: str | os.PathLike[str], pid: int) -> Path:
    """Where a server of this workspace with process id ``pid`` records its URL while it runs."""
    return Path(cache_dir) / RECORDS / f"{pid}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def experiment_url(base: str, run_info_path: str) -> str:
    """The page of a run info JSON, as Marin's data browser spells it: ``<base>/experiment?path=...``."""
    return f"{base}/experiment?path=" + urllib.parse.quote(run_info_path)


def step_url(base: str, prefix: str, output_path: str) -> str:
    """The stable page of a step: ``<base>/step/<output path relative to the prefix>``."""
    relative = output_path[len(prefix) :].lstrip("/") if output_path.startswith(prefix) else output_path
    return f"{base}/step/" + urllib.parse.quote(relative)
