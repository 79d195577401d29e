"""Fixtures of the ML rule tests: one quickstart workspace for the session (see ``qs_workspace``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator

import pytest
from qs_workspace import HAVE_LEVANTER, Build, Workspace, make_workspace
from tokenize_ws import pool_workers


@pytest.fixture(scope="session")
def quickstart(tmp_path_factory) -> Workspace:
    """A quickstart workspace shared by the ML tests (built by the first test that builds it)."""
    if not HAVE_LEVANTER:
        pytest.skip("levanter is not installed (the ml extra: pip install -e '.[ml]')")
    return make_workspace(tmp_path_factory.mktemp("quickstart-ws"))


@pytest.fixture(scope="session")
def built_quickstart(quickstart: Workspace) -> tuple[Workspace, Build]:
    """The quickstart workspace after its first full build (asserted to have succeeded)."""
    result = quickstart.build()
    assert result.code == 0, result.stderr[-5000:]
    return quickstart, result


@pytest.fixture
def warm_env() -> Iterator[dict[str, str]]:
    """The environment of builds whose pool workers outlive them (two minutes idle), in a runtime folder of this
    test's own (short: a socket's path is at most 107 bytes); its workers are killed at the end."""
    runtime = tempfile.mkdtemp(prefix="mbw-", dir="/tmp")
    yield {"XDG_RUNTIME_DIR": runtime, "MARINBUILD_WORKER_IDLE": "120"}
    for pid in pool_workers(runtime):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(runtime, ignore_errors=True)
