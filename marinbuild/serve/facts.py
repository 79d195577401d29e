"""Small readers the pages share: a path relative to the prefix, a JSON file, the state word a page shows."""

from __future__ import annotations

import json
from typing import Any

from marinbuild.cache import probe as pb
from marinbuild.store import fs
from marinbuild.store.status import STATUS_DEP_FAILED


def relative(prefix: str, output_path: str) -> str:
    """``output_path`` relative to ``prefix`` (the part of a step's URL after ``/step/``); unchanged if outside."""
    return output_path[len(prefix) :].lstrip("/") if output_path.startswith(prefix) else output_path


def read_json(path: str) -> Any:
    """The JSON value in the file at ``path``; None if there is none or it does not parse."""
    data = fs.read_bytes(path)
    if data is None:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return None


def shown_state(state: str, status: str | None) -> str:
    """The pages' state word: cache status's, a dependency failure told apart, ``damaged: <why>`` as ``damaged``."""
    if state == pb.FAILED and status == STATUS_DEP_FAILED:
        return "dep_failed"
    return "damaged" if state.startswith("damaged") else state
