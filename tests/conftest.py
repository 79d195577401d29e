"""Shared pytest fixtures."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")


@pytest.fixture
def prefix(tmp_path):
    """A fresh local prefix folder."""
    p = tmp_path / "prefix"
    p.mkdir()
    return str(p)
