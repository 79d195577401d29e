"""lm-eval tasks as levanter takes them: task names checked, a target's own task files, the harness config.

Imports lm-eval and levanter inside the functions (call them only in the eval or training child). A target's
``task_files`` are copied into a fresh folder with the package's layout and given to lm-eval's ``TaskManager`` as
``include_path``. levanter's ``LmEvalHarnessConfig.to_task_dict`` uses a ``TaskManager()`` without include path and
passes each task as a dict of overrides, which lm-eval 0.4.13 reads as a whole inline task (losing a registered task's
dataset and prompts): ``LocalTasksHarnessConfig`` loads each task by name instead, sets its few-shot count as
``simple_evaluate`` does and renames it to its alias. Task names are checked before the model loads, as levanter retries
a failing task load for minutes."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
import shutil
import warnings
from typing import Any

import fsspec


class UnknownTaskError(ValueError):
    """A task name that neither lm-eval's registry nor the target's task files define."""


def check_task_names(names: list[str], include_path: str | None) -> None:
    """Raise ``UnknownTaskError`` naming every task lm-eval cannot find (with close names, when any)."""
    from lm_eval.tasks import TaskManager

    known = set(TaskManager(include_path=include_path).all_tasks)
    unknown = [name for name in names if name not in known]
    if not unknown:
        return
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known), n=3)
        parts.append(f"{name!r}" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    where = "lm-eval's task registry" + (" or the target's task_files" if include_path else "")
    raise UnknownTaskError(f"unknown lm-eval task {', '.join(parts)}: not in {where}")


def harness_config(specs: list[dict[str, Any]], include_path: str | None, max_examples: int | None) -> Any:
    """levanter's ``LmEvalHarnessConfig`` for ``specs``, loading tasks with ``include_path`` as well."""
    from levanter.eval_harness import LmEvalHarnessConfig, TaskConfig

    @dataclasses.dataclass(frozen=True)
    class LocalTasksHarnessConfig(LmEvalHarnessConfig):
        include_path: str | None = None

        def to_task_dict(self) -> dict:
            import lm_eval.tasks as tasks

            manager = tasks.TaskManager(include_path=self.include_path)
            loaded: dict = {}
            # a local task's data files are named relative to its package: lm-eval reads them from there
            with contextlib.chdir(self.include_path or os.getcwd()):
                for spec in self.to_task_spec():
                    name = spec["task"]
                    ours = str(spec.get("task_alias") or name).replace(" ", "_")
                    with warnings.catch_warnings():  # deprecated in lm-eval 0.4.13, but its format is levanter's
                        warnings.simplefilter("ignore", DeprecationWarning)
                        task_dict = tasks.get_task_dict([name], manager)
                    if spec.get("num_fewshot") is not None:
                        set_fewshot(task_dict, int(spec["num_fewshot"]))
                    for key, value in self._rename_tasks_for_eval_harness(task_dict, name, ours).items():
                        if key in loaded:
                            raise ValueError(f"task {key} is listed twice: give each a task_alias")
                        loaded[key] = value
            return loaded

    return LocalTasksHarnessConfig(
        task_spec=[TaskConfig(**spec) for spec in specs], max_examples=max_examples, include_path=include_path
    )


def set_fewshot(task_dict: dict, num_fewshot: int) -> None:
    """Set every task's few-shot count in an lm-eval task dict (groups too), as ``simple_evaluate`` does."""
    for value in task_dict.values():
        if isinstance(value, dict):
            set_fewshot(value, num_fewshot)
        elif hasattr(value, "set_config"):
            value.set_config(key="num_fewshot", value=num_fewshot)


def copy_task_files(task_files: dict[str, str], root: str) -> str | None:
    """Copy ``{package-relative path: path}`` under ``root``; the folder to include (None: no files)."""
    if not task_files:
        return None
    for relative, source in sorted(task_files.items()):
        dest = os.path.join(root, relative)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with fsspec.open(source, "rb") as src, open(dest, "wb") as out:
            shutil.copyfileobj(src, out)
    return root
