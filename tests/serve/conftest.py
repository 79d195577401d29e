"""Fixtures of the serve tests: one built workspace and one server over it for the whole session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from serve_ws import Server, build_workspace


@pytest.fixture(scope="session")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_workspace(tmp_path_factory.mktemp("serve") / "ws")


@pytest.fixture(scope="session")
def server(ws: Path) -> Iterator[Server]:
    running = Server(ws)
    yield running
    running.stop()
