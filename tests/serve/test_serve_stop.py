"""`marinbuild serve` exits within a second of SIGTERM, whatever its clients are doing.

The server runs in a workspace of its own: a Marin script whose import blocks while a file exists, so a
``/api/graph`` request (each one analyses the workspace afresh) can be held in flight for as long as the test
wants, with a page's event stream open beside it. SIGTERM then must end the process at once, with exit 143
(128 + SIGTERM), its record of the URL removed, and the stream ended by the server.
"""

from __future__ import annotations

import http.client
import signal
import subprocess
import threading
import time
from pathlib import Path

from serve_ws import Server
from workspaces import write_workspace

SCRIPT = """
import os
import time
from dataclasses import dataclass

from marinbuild.executor import ExecutorStep, this_output_path

HOLD, HELD = {hold!r}, {held!r}
if os.path.exists(HOLD):  # an analysis that takes as long as the test wants
    open(HELD, "w").close()
    while os.path.exists(HOLD):
        time.sleep(0.05)


@dataclass(frozen=True)
class C:
    output_path: str


def touch(config):
    os.makedirs(config.output_path, exist_ok=True)


slow = ExecutorStep(name="slow/step", fn=touch, config=C(output_path=this_output_path()))
"""


def wait_for(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def test_sigterm_ends_the_server_within_a_second_with_a_request_in_flight_and_a_stream_open(tmp_path: Path) -> None:
    hold, held = tmp_path / "hold", tmp_path / "held"
    ws = write_workspace(
        tmp_path / "ws",
        {
            "pipe/script.py": SCRIPT.format(hold=str(hold), held=str(held)),
            "pipe/BUILD.marin": 'load("@marinbuild//rules:python.py", "executor_script")\n'
            'executor_script(name = "slow", script = "script.py")\n',
        },
    )
    server = Server(ws)
    records = list((ws / ".marinbuild" / "serve").glob("*.json"))
    assert len(records) == 1
    stream_conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    graph_conn = http.client.HTTPConnection(server.host, server.port, timeout=30)
    answers: list[object] = []
    try:
        stream_conn.request("GET", "/api/events")
        stream = stream_conn.getresponse()
        assert stream.readline() == b": connected\n" and stream.readline() == b"\n"

        def ask_for_the_graph() -> None:
            try:
                graph_conn.request("GET", "/api/graph")
                response = graph_conn.getresponse()
                answers.append(response.status)
                response.read()
            except (OSError, http.client.HTTPException) as exc:  # cut by the stopping server: also fine
                answers.append(exc)

        hold.touch()
        asking = threading.Thread(target=ask_for_the_graph, daemon=True)
        asking.start()
        wait_for(held)  # the request is in the middle of its analysis

        sent = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        try:
            code = server.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            raise AssertionError("serve was still running 2 s after SIGTERM") from None
        took = time.monotonic() - sent
        assert code == 128 + signal.SIGTERM, code
        assert took < 2, took
        assert stream.read() == b""  # the stream was ended, not left hanging
        asking.join(timeout=10)
        assert len(answers) == 1 and (answers[0] == 503 or isinstance(answers[0], Exception)), answers
        assert not any(r.exists() for r in records)  # the URL record is gone with the server
        rest = server.proc.stderr.read() if server.proc.stderr else ""
        assert "Traceback" not in rest, rest
    finally:
        hold.unlink(missing_ok=True)
        stream_conn.close()
        graph_conn.close()
        if server.proc.poll() is None:
            server.stop()
