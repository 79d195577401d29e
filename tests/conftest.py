"""Shared pytest fixtures, and the markers that let ``make test-fast`` leave out the slow suites.

Every test under ``tests/ray`` (a real local Ray cluster: the ``ray_cluster`` fixture lives there),
``tests/gcs`` (fake-gcs-server: ``gcs_server``) and ``tests/ml`` (real tokenizing and training with
levanter) gets its folder's marker here, so no test file has to remember it; a test elsewhere that
needs one (a Ray test that also trains) says so with a ``pytestmark`` line. pyproject.toml registers
the markers; ``make test`` runs everything.

``make test-fast`` runs in several processes (pytest-xdist): a test keeps what it writes under its
``tmp_path`` and listens on ports the system picks, so that tests running side by side never share a
file, a port or an environment variable.
"""

from __future__ import annotations

import compileall
import os
from pathlib import Path

import pytest

import marinbuild
from marinbuild.load.repos import marinbuild_rules_dir

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
os.environ.setdefault("MARINBUILD_WORKER_IDLE", "0")  # no pool worker outlives its build (but where a test says)

TESTS = Path(__file__).parent
MARKED_FOLDERS = ("ray", "gcs", "ml")  # each folder's marker has its name


def pytest_configure(config: pytest.Config) -> None:
    """Compile marinbuild's modules and its shipped rules to ``__pycache__`` once, in the controlling process
    (not again in each xdist worker).

    The tests start hundreds of ``python -m marinbuild`` children. Where PYTHONDONTWRITEBYTECODE is set (container
    images often set it) a child writes no bytecode, so without this each one would compile marinbuild's modules
    afresh, which costs more than a small build itself. The variable is left as it is: the test workspaces' own
    modules are still imported as the environment says, since a ``__pycache__`` folder appearing in a workspace
    changes what the next build sees there."""
    if not hasattr(config, "workerinput"):
        for folder in (Path(marinbuild.__file__).parent, marinbuild_rules_dir()):
            _compile(folder)


def _compile(folder: Path) -> None:
    """``compileall`` on ``folder``, keeping the time of each folder it makes a ``__pycache__`` in.

    A build signs the times of marinbuild's own folders and distrusts one changed within its racy window (two
    seconds): a first compile, in a fresh clone, would otherwise make the builds of the first tests take the
    distrustful path, which tests asserting the path a build took (tests/test_rows.py) see. Only a
    ``__pycache__`` folder, which marinbuild does not read, was added, so the folder's time is put back."""
    uncached = [d for d in (folder, *folder.rglob("*")) if d.is_dir() and not (d / "__pycache__").exists()]
    times = {d: d.stat() for d in uncached if d.name != "__pycache__"}
    compileall.compile_dir(folder, quiet=1)
    for path, st in times.items():
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


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
