"""A levanter tracker that writes metrics as JSON lines: ``{"step": 12, "train/loss": 3.1, ...}``.

Registered as ``marinbuild_jsonl`` when imported (in the training process). Local files are appended a line at a time,
other paths rewritten every ``flush_seconds`` and at the end; a resumed run replaces the records from its start step on.
Only scalar training, eval, optimizer, mixture, lm-eval and throughput metrics are kept. A record without a step belongs
to the last step logged, as with W&B."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections.abc import Mapping
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem
from levanter.tracker.tracker import Tracker, TrackerConfig

from marinbuild.ml.jsonl import read_records

KEPT_PREFIXES = ("train/", "eval/", "optim/", "mixture/", "lm_eval/")
KEPT_KEYS = {
    "throughput/examples_per_second",
    "throughput/tokens_per_second",
    "throughput/total_tokens",
    "parameter_count",
    "global_step",
}


def _scalar(value: Any) -> float | int | None:
    try:
        if hasattr(value, "item") and getattr(value, "size", 1) == 1:
            value = value.item()
    except Exception:
        return None
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    return value if isinstance(value, float) and math.isfinite(value) else None


def _scalars(metrics: Mapping[str, Any], keep: Any = lambda key: True) -> dict[str, Any]:
    """The finite scalar values of ``metrics`` (flattened) whose keys ``keep`` keeps."""
    return {k: s for k, v in _flatten(metrics).items() if keep(k) and (s := _scalar(v)) is not None}


def _flatten(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, name + "/"))
        else:
            out[name] = value
    return out


class JsonlTracker(Tracker):
    name: str = "marinbuild_jsonl"

    def __init__(self, path: str, start_step: int = 0, flush_seconds: float = 60.0, keep_all: bool = False):
        self.path = path
        self.keep_all = keep_all
        self.flush_seconds = flush_seconds
        fs, self._fs_path = fsspec.core.url_to_fs(path)
        self._fs = fs
        self._local = isinstance(fs, LocalFileSystem)
        kept = [r for r in read_records(path) if "step" in r and r["step"] is not None and r["step"] < start_step]
        self._records: list[dict[str, Any]] = kept
        self._last_flush = time.monotonic()
        fs.makedirs(os.path.dirname(self._fs_path), exist_ok=True)
        self._rewrite()
        self.summary: dict[str, Any] = {}
        self._step: int | None = None  # the last step logged: what a record logged without one belongs to

    def _keep(self, key: str) -> bool:
        return self.keep_all or key.startswith(KEPT_PREFIXES) or key in KEPT_KEYS

    def log_hyperparameters(self, hparams: dict[str, Any]) -> None:
        pass

    def log(self, metrics: Mapping[str, Any], *, step: int | None, commit: bool | None = None) -> None:
        record = _scalars(metrics, self._keep)
        if step is not None:
            self._step = int(step)
        if record:
            self._write({"step": self._step, **record})

    def _write(self, record: dict[str, Any]) -> None:
        self._records.append(record)
        if self._local:
            with open(self._fs_path, "a") as f:
                f.write(json.dumps(record) + "\n")
        elif time.monotonic() - self._last_flush > self.flush_seconds:
            self._rewrite()

    def log_summary(self, metrics: Mapping[str, Any]) -> None:
        """Summary values (e.g. ``parameter_count``) are kept as a ``{"summary": {...}}`` record."""
        summary = _scalars(metrics)
        if summary:
            self.summary.update(summary)
            self._write({"summary": summary})

    def log_artifact(self, artifact_path: Any, *, name: str | None = None, type: str | None = None) -> None:
        pass

    def finish(self) -> None:
        if not self._local:
            self._rewrite()

    def _rewrite(self) -> None:
        with self._fs.open(self._fs_path, "w") as f:
            for record in self._records:
                f.write(json.dumps(record) + "\n")
        self._last_flush = time.monotonic()


@TrackerConfig.register_subclass("marinbuild_jsonl")
@dataclasses.dataclass
class JsonlTrackerConfig(TrackerConfig):
    path: str = "metrics.jsonl"
    start_step: int = 0
    keep_all: bool = False

    def init(self, run_id: str | None) -> Tracker:
        import jax

        if jax.process_index() != 0:
            from levanter.tracker.tracker import NoopTracker

            return NoopTracker()
        return JsonlTracker(self.path, start_step=self.start_step, keep_all=self.keep_all)
