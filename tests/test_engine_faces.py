"""One engine, two faces: the CLI reaches the engine without the Marin facade.

Each check runs in a fresh interpreter, so what it reports is what a user's process loads.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from workspaces import two_step_workspace

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def python(code: str, cwd: Path, **env: str) -> list[str]:
    """Run ``code`` in a fresh interpreter with this checkout first on the path; its stdout's lines."""
    environ = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    environ.pop("MARIN_PREFIX", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=environ, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_cli_builds_through_the_engine_without_the_marin_facade(tmp_path: Path) -> None:
    """Importing the package, the session, the engine and the CLI, a build and a dry run: no
    ``marinbuild.executor``. The build really ran (its output is there)."""
    root = two_step_workspace(tmp_path / "ws", "steps")
    lines = python(
        """
        import sys
        import marinbuild, marinbuild.engine, marinbuild.analysis.session, marinbuild.cli
        print("after import:", "marinbuild.executor" in sys.modules)
        from marinbuild.cli import main
        assert main(["build", "//pipe:b"]) == 0
        assert main(["build", "--dry_run", "//pipe:b"]) == 0
        print("after build:", "marinbuild.executor" in sys.modules)
        """,
        root,
    )
    assert lines[0] == "after import: False" and lines[-1] == "after build: False"
    assert sorted(p.name.rsplit("-", 1)[0] for p in (root / "out" / "pipe").iterdir()) == ["a", "b"]


HEAVY = ("ray", "jax", "levanter", "gcsfs", "rich", "starlette", "starlark")
"""What the package's import and the command line's start never load (a command that needs one loads it)."""


def test_importing_marinbuild_and_starting_the_cli_load_no_heavy_library(tmp_path: Path) -> None:
    lines = python(
        f"""
        import sys
        import marinbuild, marinbuild.executor, marinbuild.cli
        try:
            marinbuild.cli.main(["--help"])
        except SystemExit:
            pass
        print(sorted(m for m in {HEAVY!r} if m in sys.modules))
        """,
        tmp_path,
    )
    assert lines[-1] == "[]"
