"""Requirement names in ``runtime_env.pip_requirements`` are read by ``packaging`` (PEP 508), not patterns."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from marinbuild.run.runtime_env import pip_requirements

PYPROJECT = """
[project]
name = "My.Proj"

[project.optional-dependencies]
tpu = ["jax[tpu]>=0.4", "my-proj [gcs, plots] >=0.1 ; python_version >= '3.8'"]
gcs = ["gcsfs>=2025.3"]
plots = ["matplotlib"]
broken = ["my_proj[gcs"]
"""


def test_self_references_follow_pep_508(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    # 'my-proj [gcs, plots] ...' names the project itself (names compare as PEP 503 normalises them): its extras
    assert pip_requirements(["tpu"], tmp_path) == ["jax[tpu]>=0.4", "gcsfs>=2025.3", "matplotlib"]


def test_a_malformed_requirement_is_an_error_not_dropped(tmp_path: Path) -> None:
    """A pattern read 'my_proj[gcs' as the project itself without extras, and silently dropped it."""
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    with pytest.raises(ValueError, match=r"group 'broken' holds 'my_proj\[gcs', which is not a requirement"):
        pip_requirements(["broken"], tmp_path)


def test_submit_with_a_malformed_extra_is_one_line_before_any_connection(tmp_path: Path) -> None:
    """The real CLI: ``submit --extra broken`` names the pyproject entry and exits 2, without reaching the
    (here unreachable) cluster first."""
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "marinbuild",
            "submit",
            "--address",
            "http://127.0.0.1:9",
            "--extra",
            "broken",
            "--",
            "true",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "group 'broken' holds 'my_proj[gcs', which is not a requirement" in lines[0]
