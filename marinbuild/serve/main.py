"""Starting the server: the socket, the warning for a non-loopback host, the record builds read, uvicorn.

``serve`` binds the socket itself first, so a busy port is one ``CannotListen`` (one line, exit 2) rather than uvicorn's
log; port 0 picks a free one. While it runs, ``<workspace>/.marinbuild/serve/<pid>.json`` holds its URL so builds print
links to it (``marinbuild.engine.serve_url``); it is removed on the way out."""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import sys
from typing import Any

from marinbuild.engine.serve_url import record_path
from marinbuild.serve.model import ViewModel
from marinbuild.serve.stopping import Stopping


class CannotListen(Exception):
    """The port is taken, or the host is not an address of this machine: the user's to fix (one line, exit 2)."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; CannotListen if the port is taken or the host cannot be used."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise CannotListen(f"cannot use host {host!r}: {exc.strerror}") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise CannotListen(f"port {port} on {host} is already in use: pick another with --port") from None
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(128)
    return sock


def _server_class() -> type:
    import uvicorn

    class StoppingServer(uvicorn.Server):
        """uvicorn's server, also telling the app's event streams to end when a signal asks it to stop."""

        def __init__(self, config: Any, stopping: Stopping):
            super().__init__(config)
            self.stopping = stopping

        def handle_exit(self, sig: int, frame: Any) -> None:
            self.stopping.set()
            super().handle_exit(sig, frame)

    return StoppingServer


def serve(root: str, patterns: list[str], prefix: str | None, host: str, port: int) -> None:
    import uvicorn

    from marinbuild.serve.app import create_app  # lazy: starlette

    model = ViewModel(root, patterns, prefix)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    url = f"http://{shown_host}:{bound}"
    # uvicorn stops on SIGTERM, then raises it again for the handler it found: make that one leave by SystemExit,
    # so the record is removed (installed before the record is written).
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    record = record_path(model.cache_dir, os.getpid())
    record.parent.mkdir(parents=True, exist_ok=True)
    local_url = url if host not in ("0.0.0.0", "::") else f"http://127.0.0.1:{bound}"
    try:
        record.write_text(json.dumps({"pid": os.getpid(), "url": local_url, "prefix": model.prefix}))
        if not is_loopback(host):
            print(
                f"marinbuild: warning: serving on {host}, not loopback: anyone who can reach this machine can read "
                "the workspace's graph, configs and the files of the prefix",
                file=sys.stderr,
            )
        print(
            f"marinbuild: serving {' '.join(patterns)} (prefix {model.prefix}) at {url}/ (read-only; Ctrl-C stops)",
            file=sys.stderr,
            flush=True,
        )
        stopping = Stopping()
        app = create_app(model, loopback_only=is_loopback(host), stopping=stopping)
        # Every response of the app ends as soon as it is told to stop, so the process exits well within a second
        # of SIGTERM or Ctrl-C; the timeout only bounds a response stuck on a client that stopped reading.
        config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, lifespan="off")
        _server_class()(config, stopping).run(sockets=[sock])
    finally:
        record.unlink(missing_ok=True)
