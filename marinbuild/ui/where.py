"""Where to look after a build, as Marin's ``executor_main`` prints it (stderr lines; none for a dry run).

``where_to_look(engine, ran)``: the experiment page if a web view answers (``$MARINBUILD_SERVE_URL``), else the run info
file; each ran step's W&B run (``tracker = "wandb"``) or ``tensorboard --logdir`` command. ``failure_pages``: each
failed step's web page, when a view is configured."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from marinbuild.engine.serve_url import ENV, step_url

if TYPE_CHECKING:
    from marinbuild.engine import Engine

MAX_FAILURE_PAGES = 5


def where_to_look(engine: Engine, ran: list[Any]) -> list[str]:
    lines = []
    if engine.executor_info_path is not None:
        shown = f"experiment page: {engine.experiment_url()}" if os.environ.get(ENV) else None
        lines.append(shown or f"run info: {engine.executor_info_path} (marinbuild serve shows its page)")
    project = os.environ.get("WANDB_PROJECT", "marin")
    entity = os.environ.get("WANDB_ENTITY")
    for step in ran:
        attrs = getattr(step.config, "attrs", None)
        tracker = attrs.get("tracker") if isinstance(attrs, dict) else None
        if tracker == "tensorboard":
            logdir = os.path.join(engine.output_paths[step].rstrip("/"), "tensorboard")
            lines.append(f"TensorBoard of {step.name}: tensorboard --logdir {logdir}")
        if tracker != "wandb":
            continue
        run_id = os.path.basename(engine.output_paths[step].rstrip("/"))
        if entity:
            lines.append(f"W&B run of {step.name}: https://wandb.ai/{entity}/{project}/runs/{run_id}")
        else:
            lines.append(f"W&B run of {step.name}: project {project}, run {run_id} (set WANDB_ENTITY for its URL)")
    return lines


def failure_pages(prefix: str, failures: list[Any]) -> list[str]:
    base = os.environ.get(ENV)
    if not base:
        return []
    return [
        f"step page of {p.step}: {step_url(base.rstrip('/'), prefix, p.output_path)}"
        for p in failures[:MAX_FAILURE_PAGES]
        if p.output_path
    ]
