"""The other per-step files Marin reads: ``.executor_info`` and ``.artifact.json`` (run info: ``run_info.py``).

Both written atomically in Marin's forms. Readers give None for an absent file and raise ``DamagedFileError`` for one
that is not JSON; ``read_artifact`` also finds Marin's legacy names; ``write_missing_infos`` never overwrites."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

from marinbuild.core.jsonenc import MarinJsonEncoder
from marinbuild.store import fs
from marinbuild.store.status import DamagedFileError

INFO_FILE = ".executor_info"
ARTIFACT_FILE = ".artifact.json"
LEGACY_ARTIFACT_FILES = ("artifact.json", ".artifact")


def info_path(output_path: str) -> str:
    return fs.join(output_path, INFO_FILE)


def write_info(output_path: str, text: str) -> None:
    fs.write_atomic(info_path(output_path), (text + "\n").encode())


def write_missing_infos(texts: dict[str, Callable[[], str]], workers: int = 16) -> list[str]:
    """Write ``texts[path]()`` as ``.executor_info`` where a path lacks one (remote concurrently); those paths."""
    paths = list(texts)

    def one(path: str) -> bool:
        if fs.exists(info_path(path)):
            return False
        write_info(path, texts[path]())
        return True

    if len(paths) < 2 or all(fs.is_local(p) for p in paths):
        return [p for p in paths if one(p)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(paths))) as pool:
        return [p for p, wrote in zip(paths, pool.map(one, paths), strict=True) if wrote]


def read_info(output_path: str) -> dict[str, Any] | None:
    path = info_path(output_path)
    data = fs.read_bytes(path)
    if data is None:
        return None
    try:
        info = json.loads(data)
    except ValueError:
        raise DamagedFileError(path, "info file is not JSON") from None
    if not isinstance(info, dict):
        raise DamagedFileError(path, "info file is not a JSON object")
    return info


def encode_artifact(value: Any) -> bytes:
    """A step's return value as Marin saves it: pydantic models and dataclasses as JSON objects."""
    if value is None:  # most steps return nothing
        return b"null"
    if hasattr(value, "model_dump_json"):
        return value.model_dump_json().encode()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.dumps(value, cls=MarinJsonEncoder).encode()


def write_artifact(output_path: str, value: Any) -> None:
    fs.write_atomic(fs.join(output_path, ARTIFACT_FILE), encode_artifact(value))


def read_artifact(output_path: str) -> Any:
    """The step's saved return value (legacy names too); None if there is none."""
    for name in (ARTIFACT_FILE, *LEGACY_ARTIFACT_FILES):
        path = fs.join(output_path, name)
        data = fs.read_bytes(path)
        if data is not None:
            try:
                return json.loads(data)
            except ValueError:
                raise DamagedFileError(path, "artifact file is not JSON") from None
    return None
