"""Fixtures of the ML rule tests: one quickstart workspace for the session (see ``qs_workspace``)."""

from __future__ import annotations

import pytest
from qs_workspace import HAVE_LEVANTER, Build, Workspace, make_workspace


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
