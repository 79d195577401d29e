"""A training report: one metrics JSON and a PNG of training and validation loss per step.

``build_report`` reads a ``train_lm`` output and any ``eval_lm`` and ``eval_harness`` outputs and writes
``metrics.json`` (losses and learning rate per step, summary, evaluations, key settings, task scores) and ``loss.png``
(losses per step, log scale, final evaluations in the legend, settings under the title, a bar panel of task metrics).
matplotlib (Agg) is imported only here."""

from __future__ import annotations

import contextlib
import json
import math
import os
from typing import Any

import fsspec

from marinbuild.ml.jsonl import read_records

HARNESS_RESULTS = "results.json"  # marinbuild.ml.eval_harness.RESULTS (not imported: that module is the child's)


def _series(records: list[dict[str, Any]], key: str) -> list[list[float]]:
    """``[[step, value], ...]`` for ``key``, one value per step (a resumed run's later value wins), sorted."""
    by_step: dict[int, float] = {}
    for record in records:
        if key in record and record.get("step") is not None:
            by_step[int(record["step"])] = record[key]
    return [[step, by_step[step]] for step in sorted(by_step)]


def collect(train_output: str, eval_outputs: list[str]) -> dict[str, Any]:
    records = read_records(os.path.join(train_output, "metrics.jsonl"))
    validation_keys = sorted(
        {k for r in records for k in r if k.startswith("eval/") and k.endswith("/loss") and k != "eval/loss"}
    )
    summary: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError), fsspec.open(os.path.join(train_output, "summary.json"), "r") as f:
        summary = json.load(f)
    evaluations: dict[str, Any] = {}
    harness: dict[str, Any] = {}
    for path in eval_outputs:
        name = os.path.basename(path.rstrip("/")).rsplit("-", 1)[0]
        try:
            with fsspec.open(os.path.join(path, "eval.json"), "r") as f:
                evaluations[name] = json.load(f)
        except FileNotFoundError:  # an eval_harness output
            with fsspec.open(os.path.join(path, HARNESS_RESULTS), "r") as f:
                harness[name] = json.load(f)
    return {
        "model": os.path.basename(train_output.rstrip("/")),
        "parameter_count": summary.get("parameter_count"),
        "train_loss": _series(records, "train/loss"),
        "validation_loss": {k[len("eval/") : -len("/loss")]: _series(records, k) for k in validation_keys},
        "overall_validation_loss": _series(records, "eval/loss"),
        "learning_rate": _series(records, "optim/learning_rate"),
        "summary": summary,
        "evaluations": evaluations,
        "task_scores": task_scores(harness),
    }


def task_scores(harness: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One headline number per lm-eval task: ``acc`` when it has it, else its first metric alphabetically."""
    scores: dict[str, dict[str, Any]] = {}
    for evaluation, result in sorted(harness.items()):
        for task, metrics in sorted(result.get("results", {}).items()):
            if not metrics:
                continue
            metric = "acc" if "acc" in metrics else sorted(metrics)[0]
            key = task if task not in scores else f"{evaluation}/{task}"
            step = result.get("step")
            scores[key] = {"metric": metric, "value": metrics[metric], "step": step, "evaluation": evaluation}
    return scores


def key_settings(train_output: str, parameter_count: int | None) -> dict[str, Any]:
    """Model size, learning rate, batch size, steps and sequence length from the target's ``.executor_info``."""
    attrs: dict[str, Any] = {}
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
        with fsspec.open(os.path.join(train_output, ".executor_info"), "r") as f:
            attrs = json.load(f).get("config", {}).get("attrs", {}) or {}
    model = attrs.get("model") or {}
    optimizer = attrs.get("optimizer") or {}
    trainer = attrs.get("trainer") or {}
    shape = None
    if model.get("hidden_dim") and model.get("num_layers"):
        shape = f"{model.get('type', 'model')} {model['num_layers']}x{model['hidden_dim']}"
    return {
        "model": shape,
        "parameters": parameter_count,
        "learning_rate": optimizer.get("learning_rate"),
        "batch_size": trainer.get("batch_size"),
        "steps": trainer.get("num_train_steps"),
        "seq_len": trainer.get("seq_len") or model.get("seq_len"),
    }


_SETTING_FORMS = {"learning_rate": "lr {:g}", "batch_size": "batch {}", "steps": "{} steps", "seq_len": "seq {}"}


def settings_line(settings: dict[str, Any]) -> str:
    """``llama 4x64, 1.2M parameters, lr 0.003, batch 32, 200 steps, seq 128`` (what is known)."""
    parts = []
    if settings.get("model"):
        parts.append(str(settings["model"]))
    params = settings.get("parameters")
    if params:
        parts.append(
            f"{params / 1e9:.1f}B parameters"
            if params >= 1e9
            else f"{params / 1e6:.1f}M parameters"
            if params >= 1e6
            else f"{params:,} parameters"
        )
    for key, form in _SETTING_FORMS.items():
        if settings.get(key) is not None:
            parts.append(form.format(settings[key]))
    return ", ".join(parts)


def _moving_average(values: list[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(metrics: dict[str, Any], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scores = metrics.get("task_scores") or {}
    if scores:
        fig, (ax, bars) = plt.subplots(1, 2, figsize=(13, 5), dpi=100, gridspec_kw={"width_ratios": [8, 5]})
        _task_bars(bars, scores)
    else:
        fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    train = metrics["train_loss"]
    if train:
        steps, losses = [s for s, _ in train], [v for _, v in train]
        ax.plot(steps, losses, color="tab:blue", alpha=0.35, linewidth=1, label="train loss")
        if (window := max(1, len(losses) // 20)) > 1:
            average = _moving_average(losses, window)
            ax.plot(steps, average, color="tab:blue", linewidth=2, label=f"train loss ({window}-step average)")
    colors = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown"]
    series = [(name, s) for name, s in metrics["validation_loss"].items() if s]
    if len(series) > 1 and metrics["overall_validation_loss"]:
        series.append(("all datasets", metrics["overall_validation_loss"]))
    for i, (name, points) in enumerate(series):
        label = f"validation loss: {name}"
        ax.plot(*zip(*points, strict=True), marker="o", linewidth=2, color=colors[i % len(colors)], label=label)
    for name, result in metrics["evaluations"].items():
        if result.get("loss") is not None and result.get("step") is not None:
            label = f"{name}: loss {result['loss']:.3f}, perplexity {result['perplexity']:.2f}"
            ax.scatter([result["step"]], [result["loss"]], marker="*", s=160, color="black", zorder=5, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per token)")
    if train and min(v for _, v in train) > 0:
        ax.set_yscale("log")
    line = settings_line(metrics.get("settings") or {})
    shown = f"{title}\n{line}" if line else title
    ax.set_title(shown, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with fsspec.open(path, "wb") as f:
        fig.savefig(f, format="png", metadata={"Title": shown.replace("\n", " | ")})  # the title, readable by tools
    plt.close(fig)


def _task_bars(ax: Any, scores: dict[str, dict[str, Any]]) -> None:
    """Horizontal bars: each lm-eval task's headline metric, its value written at the bar's end."""
    names = list(scores)
    values = [scores[n]["value"] for n in names]
    positions = list(range(len(names)))
    ax.barh(positions, values, color="tab:green", alpha=0.8)
    ax.set_yticks(positions, [f"{n} ({scores[n]['metric']})" for n in names], fontsize=8)
    ax.invert_yaxis()
    for y, value in zip(positions, values, strict=True):
        ax.text(value, y, f" {value:.3f}", va="center", fontsize=8)
    top = max([1.0, *values]) if all(0 <= v <= 1 for v in values) else max(values, default=1.0) * 1.15
    ax.set_xlim(0, top * 1.12)
    steps = {scores[n]["step"] for n in names if scores[n].get("step") is not None}
    ax.set_title("lm-eval-harness" + (f" (step {steps.pop()})" if len(steps) == 1 else ""), fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)


def build_report(train_output: str, eval_outputs: list[str], output_path: str, title: str = "") -> dict[str, Any]:
    metrics = collect(train_output, eval_outputs)
    metrics["settings"] = key_settings(train_output, metrics.get("parameter_count"))
    fs, root = fsspec.core.url_to_fs(output_path)
    fs.makedirs(root, exist_ok=True)
    with fsspec.open(os.path.join(output_path, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    params = metrics.get("parameter_count")
    default_title = f"{metrics['model']}" + (f" ({params:,} parameters)" if params else "") + ": loss per step"
    plot(metrics, os.path.join(output_path, "loss.png"), title or default_title)
    train = metrics["train_loss"]
    final_eval = {name: r.get("loss") for name, r in metrics["evaluations"].items()}
    return {
        "metrics": os.path.join(output_path, "metrics.json"),
        "plot": os.path.join(output_path, "loss.png"),
        "steps": train[-1][0] + 1 if train else 0,
        "first_train_loss": train[0][1] if train else None,
        "final_train_loss": train[-1][1] if train else None,
        "final_eval_loss": final_eval,
        "final_perplexity": {name: (math.exp(v) if v is not None else None) for name, v in final_eval.items()},
    }
