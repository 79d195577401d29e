"""Ray runtime environments: the workspace shipped as ``working_dir``, and per-step extras.

``pip_dependency_groups`` name extras or PEP 735 ``[dependency-groups]`` of the workspace's ``pyproject.toml``
(self-references followed); other names are pip requirements. A step's env holds only what it adds: Ray merges it with
the job's."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

WORKING_DIR_EXCLUDES = (
    ".venv venv .git local_store __pycache__ *.pyc .marinbuild *.egg-info .pytest_cache .ruff_cache .mypy_cache "
    ".ipynb_checkpoints node_modules wandb *.parquet *.arrow *.jsonl.gz *.jsonl.zst *.npy *.npz *.safetensors "
    "*.ckpt *.pt *.bin *.tar *.tar.gz *.zip"
).split()
"""Paths (gitignore syntax) never uploaded with the workspace: virtualenvs, git data, caches, model and data files."""

RUNTIME_ENV_VARS_FROM_DRIVER = ("HF_TOKEN", "WANDB_API_KEY", "MARIN_PREFIX")
"""Passed on to a submitted job when set in the submitting shell (as Marin's ray_run did)."""


def project_root(start: str | os.PathLike[str] = ".") -> Path | None:
    """The nearest folder at or above ``start`` holding a ``pyproject.toml``."""
    here = Path(start).resolve()
    return next((folder for folder in (here, *here.parents) if (folder / "pyproject.toml").is_file()), None)


def _read_pyproject(root: Path | None) -> dict[str, Any]:
    if root is None or not (root / "pyproject.toml").is_file():
        return {}
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _canonical(name: str) -> str:
    from packaging.utils import canonicalize_name

    return canonicalize_name(name)


def _requirement(text: str, where: str) -> Any:
    """``text`` parsed as a PEP 508 requirement (``packaging``); ValueError naming ``where`` if it is not one."""
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(text)
    except InvalidRequirement as exc:
        reason = next(iter(str(exc).splitlines()), "")  # packaging adds the text and a caret on lines of their own
        raise ValueError(f"pyproject.toml: {where} holds {text!r}, which is not a requirement: {reason}") from exc


def pip_requirements(groups: list[str], root: Path | None = None) -> list[str]:
    """The pip requirements of ``groups`` (extras or dependency groups of ``root``'s pyproject, or requirements)."""
    data = _read_pyproject(root if root is not None else project_root())
    project = data.get("project", {})
    own_name = _canonical(project.get("name", "")) if project.get("name") else None
    extras: dict[str, list[Any]] = {_canonical(k): v for k, v in project.get("optional-dependencies", {}).items()}
    dep_groups: dict[str, list[Any]] = {_canonical(k): v for k, v in data.get("dependency-groups", {}).items()}
    out: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(groups))
    while stack:
        group = stack.pop()
        key = _canonical(group)
        if key in extras or key in dep_groups:
            if key in seen:
                continue
            seen.add(key)
            for req in reversed(extras.get(key, []) + dep_groups.get(key, [])):
                if isinstance(req, dict):  # PEP 735: {include-group = "other"}
                    stack.append(req.get("include-group", ""))
                    continue
                parsed = _requirement(req, f"group {group!r}")
                if own_name and _canonical(parsed.name) == own_name:
                    stack.extend(sorted(parsed.extras, reverse=True))
                else:
                    stack.append(req)
            continue
        if group and group not in out:
            out.append(group)
    return out


def step_runtime_env(
    pip_dependency_groups: list[str] | None, env_vars: dict[str, str] | None, root: Path | None = None
) -> dict[str, Any] | None:
    """A step's own runtime env (None if it needs nothing beyond the job's)."""
    env: dict[str, Any] = {}
    if pip_dependency_groups:
        requirements = pip_requirements(list(pip_dependency_groups), root)
        if requirements:
            env["pip"] = requirements
    if env_vars:
        env["env_vars"] = {str(k): str(v) for k, v in env_vars.items()}
    return env or None


def workspace_runtime_env(
    root: str | os.PathLike[str], env_vars: dict[str, str] | None = None, excludes: list[str] | None = None
) -> dict[str, Any]:
    """A job's runtime env: ``root`` shipped as ``working_dir`` (minus ``WORKING_DIR_EXCLUDES``), and env vars."""
    env: dict[str, Any] = {"working_dir": str(root), "excludes": list(WORKING_DIR_EXCLUDES) + list(excludes or [])}
    if env_vars:
        env["env_vars"] = {str(k): str(v) for k, v in env_vars.items()}
    return env


def in_ray_job() -> bool:
    """True inside a job submitted to a Ray cluster (its runtime env, working_dir included, is already set)."""
    return "RAY_JOB_CONFIG_JSON_ENV_VAR" in os.environ
