"""Shared pytest fixtures, and the markers that let ``make test-fast`` leave out the slow suites.

Every test under ``tests/ray`` (a real local Ray cluster: the ``ray_cluster`` fixture lives there),
``tests/gcs`` (fake-gcs-server: ``gcs_server``) and ``tests/ml`` (real tokenizing and training with
levanter) gets its folder's marker here, so no test file has to remember it; a test elsewhere that
needs one (a Ray test that also trains) says so with a ``pytestmark`` line. pyproject.toml registers
the markers; ``make test`` runs everything.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

TESTS = Path(__file__).parent
MARKED_FOLDERS = ("ray", "gcs", "ml")  # each folder's marker has its name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        folder = path.relative_to(TESTS).parts[0] if path.is_relative_to(TESTS) else None
        if folder in MARKED_FOLDERS and item.get_closest_marker(folder) is None:
            item.add_marker(folder)


@pytest.fixture
def prefix(tmp_path):
    """A fresh local prefix folder."""
    p = tmp_path / "prefix"
    p.mkdir()
    return str(p)
