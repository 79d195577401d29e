"""HTTP-level tests of every route of ``marinbuild serve``, against a workspace built by the real CLI.

The server runs as ``marinbuild serve --port 0`` in a subprocess on loopback (``serve_ws.Server``);
requests go through ``http.client`` exactly as written, so ``..`` and ``%2e%2e`` reach the server.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from serve_ws import EVIL_NAME, Server, env_for, mb


def nodes_by_name(server: Server) -> dict[str, dict]:
    return {n["name"]: n for n in server.json("/api/graph")["nodes"]}


def test_the_graph_has_each_steps_state_target_and_edges(server: Server) -> None:
    graph = server.json("/api/graph")
    nodes = {n["name"]: n for n in graph["nodes"]}
    states = {name: n["state"] for name, n in nodes.items()}
    assert states["pipe/a"] == states["pipe/b"] == states["train/lr_small"] == "built"
    assert states["pipe/bad"] == "failed"
    assert states["pipe/after_bad"] == "dep_failed"
    assert states["pipe/never"] == "missing" and states["live/slow"] == "missing"
    assert states["pipe/changed"] == "stale"
    assert nodes["pipe/b"]["label"] == "//pipe:b"
    assert [nodes["pipe/a"]["id"], nodes["pipe/b"]["id"]] in graph["edges"]
    assert nodes["pipe/a"]["duration"] is not None and nodes["pipe/a"]["duration"] >= 0  # from the event log
    assert nodes["pipe/never"]["duration"] is None


def test_the_graph_agrees_with_cache_status(server: Server, ws: Path) -> None:
    rows = json.loads(
        mb(ws, "cache", "status", "//pipe:a", "//pipe:bad", "//pipe:changed", "//pipe:never", "--output", "json").stdout
    )
    nodes = {n["label"]: n for n in server.json("/api/graph")["nodes"]}
    for row in rows:
        assert nodes[row["label"]]["state"] == row["state"], row


def test_a_step_page_says_why_in_the_words_of_marinbuild_why(server: Server, ws: Path) -> None:
    node = nodes_by_name(server)["pipe/changed"]
    step = server.json(f"/api/step/{node['relative']}")
    cli = mb(ws, "why", "//pipe:changed")
    assert cli.returncode == 0, cli.stderr
    assert step["why"].strip() == cli.stdout.strip()
    assert "version changed" in step["why"]
    assert step["label"] == "//pipe:changed" and step["rule"] == "python_step" and step["state"] == "stale"


def test_a_built_step_has_its_config_version_files_and_code_record(server: Server) -> None:
    node = nodes_by_name(server)["pipe/b"]
    step = server.json(f"/api/step/{node['relative']}")
    assert step["state"] == "built" and step["status"] == "SUCCESS"
    assert step["hash"] == node["id"].rsplit("-", 1)[1]
    assert "attrs.config" in step["versioned"] and step["config"]["attrs"]["config"] == {"v": 1}
    assert step["version"]["name"] == "pipe/b"
    assert {f["name"] for f in step["files"]} >= {"out.txt", ".executor_info", ".executor_status"}
    assert step["code"]["files"]  # the code digest it was built with
    assert step["dependencies"] == [nodes_by_name(server)["pipe/a"]["id"]]
    assert "up to date" in step["why"]
    (log,) = step["logs"]
    assert log["name"] == "logs/run.log" and log["cut"]  # 3,000 lines: the page has the end
    assert log["tail"].endswith("line 2999 of the log\n") and log["tail"].startswith("line ")


def test_a_failed_step_shows_its_traceback(server: Server) -> None:
    step = server.json(f"/api/step/{nodes_by_name(server)['pipe/bad']['relative']}")
    assert step["state"] == "failed"
    assert "RuntimeError: the bad step fails on purpose" in step["traceback"]
    assert step["traceback_file"].endswith(".marinbuild_traceback.txt")


def test_pages_are_the_shell_and_unknown_things_are_404(server: Server) -> None:
    relative = nodes_by_name(server)["pipe/a"]["relative"]
    for path, page in (
        ("/", "graph"),
        (f"/step/{relative}", "step"),
        ("/runs", "runs"),
        ("/training", "training"),
        ("/run/x", "run"),
        ("/experiment?path=x", "experiment"),
    ):
        status, headers, body = server.get(path)
        assert status == 200 and f'data-page="{page}"' in body, path
        assert "script-src" not in headers["content-security-policy"]  # default-src 'self': no inline script
        assert headers["x-content-type-options"] == "nosniff"
    assert server.get("/api/step/pipe/nothing-000000")[0] == 404
    assert server.get("/api/run/nothing")[0] == 404
    for asset in ("/static/app.js", "/static/vendor/dagre.min.js", "/static/vendor/uPlot.iife.min.js"):
        assert server.get(asset)[0] == 200


def test_no_page_holds_user_strings_in_its_html(server: Server) -> None:
    """Step names and configs reach the page only as JSON, which the script puts in textContent."""
    node = nodes_by_name(server)[EVIL_NAME]
    assert "/script>" in node["relative"]  # the name's own '/' makes folders: the URL keeps them as path segments
    page = "/step/" + "/".join(quote(p, safe="") for p in node["relative"].split("/"))
    for path in ("/", page):
        status, _, body = server.get(path)
        assert status == 200 and "pwned" not in body
    step = server.json("/api/" + page[1:])
    assert step["name"] == EVIL_NAME and step["config"]["note"] == "<script>window.pwned=2</script>"


def test_a_host_header_that_is_not_loopback_is_refused(server: Server) -> None:
    """A page of another site whose name was rebound to 127.0.0.1 sends its own name as Host."""
    assert server.get("/api/graph", headers={"Host": "evil.example:80"})[0] == 400
    assert server.get("/api/graph", headers={"Host": f"localhost:{server.port}"})[0] == 200


def test_the_server_is_read_only(server: Server) -> None:
    for method in ("POST", "PUT", "DELETE"):
        assert server.get("/api/graph", method=method)[0] == 405


def test_runs_list_builds_and_run_info_files(server: Server) -> None:
    runs = server.json("/api/runs")
    first = runs["builds"][-1]  # the fixture's build, the oldest
    assert "//pipe:bad" in first["patterns"] and first["finished"]
    assert "pipe/a" in first["ran"] and first["failed"] == ["pipe/bad"]
    assert first["dep_failed"] == ["pipe/after_bad"]
    assert runs["run_infos"] and all(r["path"].startswith(runs["prefix"] + "/experiments/") for r in runs["run_infos"])
    run = server.json(f"/api/run/{first['id']}")
    rows = {r["step"]: r for r in run["steps"]}
    assert rows["pipe/a"]["outcome"] == "succeeded" and rows["pipe/a"]["start"] <= rows["pipe/a"]["end"]
    assert rows["pipe/bad"]["outcome"] == "failed" and "the bad step fails" in rows["pipe/bad"]["error"]
    assert rows["pipe/after_bad"]["outcome"] == "dep_failed"
    info = server.json("/api/experiment?path=" + runs["run_infos"][0]["path"])
    assert info["steps"] and all(s["state"] for s in info["steps"])
    assert server.get("/api/experiment?path=/etc/passwd")[0] == 400
    assert server.get(f"/api/experiment?path={runs['prefix']}/experiments/../../pyproject.json")[0] == 400


def test_training_curves_overlay_runs_with_their_key_settings(server: Server) -> None:
    runs = {r["name"].rsplit("-", 1)[0]: r for r in server.json("/api/training")["runs"]}
    assert set(runs) == {"lr_small", "lr_big"}
    assert runs["lr_small"]["settings_line"] == "llama 2x64, 1.2M parameters, lr 0.001, batch 8, 200 steps"
    assert "lr 0.01," in runs["lr_big"]["settings_line"]
    assert runs["lr_big"]["train_loss"][0] == [0, 8.0] and len(runs["lr_big"]["train_loss"]) == 21
    assert [p[0] for p in runs["lr_big"]["validation_loss"]] == list(range(0, 201, 20))
    one = server.json(f"/api/training?path={runs['lr_big']['relative']}")
    assert [r["name"] for r in one["runs"]] == [runs["lr_big"]["name"]]


# -- the file view ---------------------------------------------------------------------------------


def test_the_file_view_shows_small_text_files_as_plain_text(server: Server) -> None:
    relative = nodes_by_name(server)["pipe/a"]["relative"]
    status, headers, body = server.get(f"/file/{relative}/out.txt")
    assert status == 200 and headers["content-type"].startswith("text/plain") and body == "written"


@pytest.mark.parametrize(
    "path",
    [
        "/file/../pyproject.toml",
        "/file/pipe/../../pyproject.toml",
        "/file/%2e%2e/pyproject.toml",
        "/file/pipe/%2E%2E/%2e%2e/pyproject.toml",
        "/file//etc/passwd",
        "/file/%2Fetc/passwd",
        "/api/step/../pipe",
        "/api/training?path=../x",
    ],
)
def test_traversal_and_absolute_paths_are_refused(server: Server, path: str) -> None:
    status, _, body = server.get(path)
    assert status == 400, (path, status, body)
    assert "refused" in body


def test_a_symlink_out_of_the_prefix_is_refused(server: Server, ws: Path) -> None:
    secret = ws.parent / "secret.txt"
    secret.write_text("not for the web")
    (ws / "out" / "escape.txt").symlink_to(secret)
    (ws / "out" / "escape_dir").symlink_to(ws.parent, target_is_directory=True)
    for path in ("/file/escape.txt", "/file/escape_dir/secret.txt"):
        status, _, body = server.get(path)
        assert status == 403 and "outside the prefix" in body and "not for the web" not in body


def test_huge_binary_and_missing_files_are_refused_with_their_status(server: Server, ws: Path) -> None:
    with open(ws / "out" / "huge.txt", "wb") as f:
        f.truncate(50 * 1024 * 1024 * 1024)  # sparse: 50 GiB on paper
    (ws / "out" / "blob.bin").write_bytes(b"\xff\xfe\x00\x81" * 10)
    assert server.get("/file/huge.txt")[0] == 413
    assert "bytes are shown" in server.get("/file/huge.txt")[2]
    assert server.get("/file/blob.bin")[0] == 415
    assert server.get("/file/nothing.txt")[0] == 404
    assert server.get("/file/pipe")[0] == 400


# -- live events -----------------------------------------------------------------------------------


def read_events(server: Server, until: str, output_path: str, started: subprocess.Popen[str]) -> list[dict]:
    """The SSE records from /api/events until one of kind ``until`` for ``output_path`` arrives."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    conn.request("GET", "/api/events")
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("content-type").startswith("text/event-stream")
    assert response.readline() == b": connected\n"
    started.stdin.close()  # the build starts once the stream is open
    seen = []
    try:
        while True:
            line = response.readline()
            assert line, "the stream ended"
            if line.startswith(b"data: "):
                record = json.loads(line[len("data: ") :])
                seen.append(record)
                if record["kind"] == until and record["output_path"] == output_path:
                    return seen
    finally:
        conn.close()


def test_events_of_a_build_arrive_on_the_stream_as_it_runs(server: Server, ws: Path) -> None:
    node = nodes_by_name(server)["pipe/a"]
    # A build that waits for its stdin to close, so it starts after the stream is open.
    code = (
        "import sys, runpy; sys.stdin.read(); sys.argv = ['marinbuild', '--rebuild', '//pipe:a', '//pipe:a']; "
        "runpy.run_module('marinbuild', run_name='__main__')"
    )
    build = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ws,
        env=env_for(ws),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        seen = read_events(server, "succeeded", node["id"], build)
    finally:
        build.wait(timeout=120)
    kinds = [r["kind"] for r in seen if r.get("output_path") == node["id"]]
    assert kinds == ["started", "succeeded"]
    assert all(r["run"] for r in seen)


# -- the command line ------------------------------------------------------------------------------


def test_a_busy_port_is_one_line_and_exit_2(server: Server, ws: Path) -> None:
    proc = mb(ws, "serve", "--port", str(server.port))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"marinbuild: error: port {server.port} on 127.0.0.1 is already in use: pick another with --port"
    ]


def test_an_address_not_of_this_machine_is_one_line_and_exit_2(ws: Path) -> None:
    proc = mb(ws, "serve", "--host", "192.0.2.1", "--port", "0")  # TEST-NET-1: no machine has it
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "marinbuild: error: cannot listen on 192.0.2.1:0: Cannot assign requested address"
    ]


def test_a_pattern_narrows_the_graph_and_a_minus_pattern_subtracts(ws: Path) -> None:
    server = Server(ws, "//pipe:all", "-//pipe:never")
    try:
        names = {n["name"] for n in server.json("/api/graph")["nodes"]}
        assert names == {"pipe/a", "pipe/b", "pipe/bad", "pipe/after_bad", "pipe/changed"}
    finally:
        server.stop()


def test_ctrl_c_stops_the_server_cleanly_with_a_page_listening(ws: Path) -> None:
    server = Server(ws)
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    conn.request("GET", "/api/events")
    stream = conn.getresponse()
    assert stream.readline() == b": connected\n" and stream.readline() == b"\n"
    server.proc.send_signal(signal.SIGINT)
    assert server.proc.wait(timeout=60) == 130
    assert stream.read() == b""  # the stream was ended by the server, not cut by a cancelled task
    conn.close()
    rest = server.proc.stderr.read() if server.proc.stderr else ""
    assert rest.strip().splitlines() == ["marinbuild: interrupted"], rest


def test_a_bad_pattern_is_exit_2_before_serving(ws: Path) -> None:
    proc = mb(ws, "serve", "//nope:nothing", "--port", "0")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "nope" in proc.stderr


def test_a_host_that_is_not_loopback_is_warned_about(ws: Path) -> None:
    server = Server(ws, "--host", "0.0.0.0")
    try:
        assert any(line.startswith("marinbuild: warning: serving on 0.0.0.0, not loopback") for line in server.lines)
        assert server.get("/api/graph")[0] == 200
        assert server.get("/api/graph", headers={"Host": "builds.example.org"})[0] == 200  # served to others on purpose
    finally:
        server.stop()
    loopback = Server(ws)
    try:
        assert not any("warning" in line for line in loopback.lines)
        assert (ws / ".marinbuild" / "serve" / f"{loopback.proc.pid}.json").exists()  # builds find it
    finally:
        loopback.stop()
    assert not (ws / ".marinbuild" / "serve" / f"{loopback.proc.pid}.json").exists()


def test_a_prefix_it_cannot_read_gives_a_clear_page(ws: Path) -> None:
    not_a_folder = ws.parent / "prefix-file"
    not_a_folder.write_text("")
    server = Server(ws, "--prefix", str(not_a_folder))
    try:
        status, headers, body = server.get("/")
        assert status == 503 and headers["content-type"].startswith("text/html")
        assert f"the prefix {not_a_folder} is not a folder" in body and "Traceback" not in body
        status, _, body = server.get("/api/graph")
        assert status == 503 and json.loads(body)["error"] == f"the prefix {not_a_folder} is not a folder"
    finally:
        server.stop()


def test_builds_point_at_the_running_view(server: Server, ws: Path) -> None:
    proc = mb(ws, "--rebuild", "//evil:script", "//evil:script")
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "experiment page:" in x)
    url = line.split("experiment page: ", 1)[1]
    assert url.startswith(f"{server.url}/experiment?path=")
    status, _, _ = server.get(url[len(server.url) :])
    assert status == 200
    data = server.json("/api/" + url[len(server.url) + 1 :])
    assert [s["name"] for s in data["steps"]] == [EVIL_NAME]


def test_a_failed_build_points_at_the_failed_steps_page(server: Server, ws: Path) -> None:
    proc = mb(ws, "//pipe:bad")
    assert proc.returncode == 1
    node = nodes_by_name(server)["pipe/bad"]
    line = f"marinbuild: step page of pipe/bad: {server.url}/step/{node['relative']}"
    assert line in proc.stderr.splitlines()
    assert "RuntimeError" in server.json(f"/api/step/{node['relative']}")["traceback"]


def test_get_experiment_url_uses_the_configured_base(tmp_path: Path) -> None:
    code = (
        "from marinbuild.executor import Executor; "
        "e = Executor(prefix='/p', executor_info_base_path='/p/experiments'); "
        "e.executor_info_path = '/p/experiments/x-1.json'; print(e.get_experiment_url())"
    )
    env = {**os.environ, "MARINBUILD_SERVE_URL": "https://builds.example.org/view/"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "https://builds.example.org/view/experiment?path=/p/experiments/x-1.json"
    env.pop("MARINBUILD_SERVE_URL")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "http://localhost:5000/experiment?path=/p/experiments/x-1.json"  # Marin's data browser


def test_serve_url_from_the_workspace_config(tmp_path: Path) -> None:
    from marinbuild.engine.serve_url import serve_url, step_url

    assert serve_url(tmp_path, {"serve_url": "https://team.example/"}) == "https://team.example"
    assert serve_url(tmp_path, {}) is None
    from marinbuild.engine.serve_url import record_path

    record_path(tmp_path, 2**22 + 12345).parent.mkdir()
    record_path(tmp_path, 2**22 + 12345).write_text(json.dumps({"pid": 2**22 + 12345, "url": "http://127.0.0.1:1"}))
    assert serve_url(tmp_path, {}) is None  # its process is gone
    record_path(tmp_path, os.getpid()).write_text(
        json.dumps({"pid": os.getpid(), "url": "http://127.0.0.1:2/", "prefix": "/p"})
    )
    assert serve_url(tmp_path, {}) == "http://127.0.0.1:2"
    assert serve_url(tmp_path, {}, "/p") == "http://127.0.0.1:2"
    assert serve_url(tmp_path, {}, "gs://b/p") is None  # a server of another prefix has not this build's pages
    assert step_url("http://h", "/p", "/p/a/b-123456") == "http://h/step/a/b-123456"


def test_the_event_log_of_a_no_op_build_is_four_lines(ws: Path) -> None:
    from marinbuild.ui.event_log import events_dir, list_logs, read_log

    assert mb(ws, "//pipe:a").returncode == 0
    before = set(list_logs(events_dir(ws / ".marinbuild")))
    started = time.time()
    assert mb(ws, "//pipe:a").returncode == 0  # a no-op
    (new,) = set(list_logs(events_dir(ws / ".marinbuild"))) - before
    log = read_log(new)
    assert log is not None and log.header["patterns"] == ["//pipe:a"] and log.header["time"] >= started - 1
    assert [e["kind"] for e in log.events] == ["build_started", "build_finished", "compute"]
    assert log.summary()["compute"]["text"] == log.events[-1]["detail"]  # the run page's "compute" row
    assert mb(ws, "-n", "//pipe:b").returncode == 0
    assert set(list_logs(events_dir(ws / ".marinbuild"))) - before == {new}  # a dry run records nothing


def test_a_running_step_shows_its_lease_holder_then_built(server: Server, ws: Path, tmp_path: Path) -> None:
    """Last in this file: it builds //live:slow, which the tests above expect not built."""
    node = nodes_by_name(server)["live/slow"]
    release = tmp_path / "release"
    code = (
        "import sys, runpy; sys.stdin.read(); sys.argv = ['marinbuild', '//live:slow']; "
        "runpy.run_module('marinbuild', run_name='__main__')"
    )
    build = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ws,
        env=env_for(ws, release),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        read_events(server, "started", node["id"], build)
        running = nodes_by_name(server)["live/slow"]
        assert running["state"] == "running" and running["holder"]  # its lease, as cache status reads it
        step = server.json(f"/api/step/{node['relative']}")
        assert step["lease"]["live"] and step["lease"]["holder"] == running["holder"]
        assert "running elsewhere" in step["why"]
    finally:
        release.touch()
        assert build.wait(timeout=120) == 0
    assert nodes_by_name(server)["live/slow"]["state"] == "built"
