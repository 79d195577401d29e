"""Sources for the ``download`` tests: a file server and a Hugging Face Hub stand-in on loopback, and a workspace.

- ``FileServer``: python's ``http.server`` serving a folder from a thread, with folder listings (what
  fsspec's HTTP filesystem reads to find files). It records every file request and can ``hold`` some
  files: half of each is sent, the rest only after ``release()`` (how a test keeps a build
  mid-download, to kill it with some files done and others partly copied).
- ``HubServer``: the three routes ``huggingface_hub`` calls for a dataset download, over files held
  in memory: ``GET /api/datasets/<id>/revision/<rev>`` (``HfApi.dataset_info``: the commit),
  ``GET /api/datasets/<id>/tree/<commit>`` (``HfApi.list_repo_tree``, recursive, with each file's
  git blob sha1 and, for files at or above ``lfs_from`` bytes, its LFS sha256) and ``GET
  /datasets/<id>/resolve/<commit>/<path>`` (the file). It answers only for its commit: a download
  that asked for anything but the resolved commit would fail. ``lie_about`` makes it publish a wrong
  sha256 for one file.
- ``DownloadWorkspace``: a workspace whose ``pipe/BUILD.marin`` the test writes, built with the real
  CLI in a child process with a build-event file.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import subprocess
import threading
import urllib.parse
from functools import partial
from pathlib import Path
from typing import Any

from workspaces import CliWorkspace, write_workspace


class _Handler(http.server.SimpleHTTPRequestHandler):
    server_state: FileServer

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        state = self.server_state
        path = urllib.parse.unquote(self.path.split("?", 1)[0])
        if (state.root / path.lstrip("/")).is_file():  # file requests only, not folder listings
            with state.lock:
                state.requests.append(path)
            if any(path.endswith(name) for name in state.held):
                self._serve_halted(state.root / path.lstrip("/"), state)
                return
        super().do_GET()

    def _serve_halted(self, file: Path, state: FileServer) -> None:
        """Half the file, then nothing until the gate opens (the client holds a partial copy meanwhile)."""
        data = file.read_bytes()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        state.gate.wait()
        self.wfile.write(data[len(data) // 2 :])

    def log_message(self, *args: Any) -> None:
        pass


class FileServer:
    """``root`` served at ``self.url`` until ``close()``."""

    def __init__(self, root: Path):
        self.root = root
        self.requests: list[str] = []
        self.lock = threading.Lock()
        self.held: set[str] = set()
        self.gate = threading.Event()
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def hold(self, names: set[str]) -> None:
        self.held = set(names)
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def fetched(self) -> list[str]:
        with self.lock:
            return list(self.requests)

    def close(self) -> None:
        self.release()
        self.httpd.shutdown()
        self.httpd.server_close()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubServer:
    """A Hub stand-in serving dataset ``dataset`` at ``commit`` (a revision ``revision`` names it)."""

    def __init__(self, dataset: str, files: dict[str, bytes], revision: str, commit: str, lfs_from: int = 64):
        self.dataset, self.files, self.revision, self.commit, self.lfs_from = dataset, files, revision, commit, lfs_from
        self.lies: dict[str, str] = {}
        self.requests: list[str] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                hub.requests.append(self.path)
                status, body, ctype = hub.answer(urllib.parse.urlsplit(self.path).path)
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                if status == 200 and "/resolve/" in self.path:
                    self.send_header("X-Repo-Commit", hub.commit)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def lie_about(self, path: str) -> None:
        self.lies[path] = "0" * 64

    def tree(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        folders = sorted({p.rsplit("/", 1)[0] for p in self.files if "/" in p})
        entries += [{"type": "directory", "path": f, "oid": "1" * 40} for f in folders]
        for path, data in sorted(self.files.items()):
            entry: dict[str, Any] = {"type": "file", "path": path, "size": len(data)}
            if len(data) >= self.lfs_from:
                pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
                entry["oid"] = git_blob_sha1(pointer.encode())
                sha = self.lies.get(path, hashlib.sha256(data).hexdigest())
                entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": len(pointer)}
            else:
                entry["oid"] = git_blob_sha1(data)
            entries.append(entry)
        return entries

    def answer(self, path: str) -> tuple[int, bytes, str]:
        api = f"/api/datasets/{self.dataset}/"
        if path == api + f"revision/{self.revision}":
            return 200, json.dumps({"id": self.dataset, "sha": self.commit}).encode(), "application/json"
        if path == api + f"tree/{self.commit}":
            return 200, json.dumps(self.tree()).encode(), "application/json"
        resolve = f"/datasets/{self.dataset}/resolve/{self.commit}/"
        if path.startswith(resolve) and urllib.parse.unquote(path[len(resolve) :]) in self.files:
            return 200, self.files[urllib.parse.unquote(path[len(resolve) :])], "application/octet-stream"
        return 404, json.dumps({"error": f"not found: {path}"}).encode(), "application/json"

    def resolved(self) -> list[str]:
        """The files requested, by path in the repository."""
        prefix = f"/datasets/{self.dataset}/resolve/{self.commit}/"
        return [urllib.parse.unquote(p[len(prefix) :]) for p in self.requests if p.startswith(prefix)]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class DownloadWorkspace(CliWorkspace):
    """A workspace (prefix ``out``) whose ``pipe/BUILD.marin`` is ``build_file``; short leases, so a rerun after
    a kill takes the step over soon."""

    def __init__(self, root: Path, build_file: str, env: dict[str, str] | None = None):
        super().__init__(write_workspace(root, {"pipe/BUILD.marin": build_file}), env)
        with (root / "pyproject.toml").open("a") as f:
            f.write("heartbeat_interval = 1\nstale_after = 4\n")

    def popen(self, target: str) -> subprocess.Popen:
        return subprocess.Popen(
            self.command(target),
            cwd=self.root,
            env=self.env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def output(self, name: str) -> Path:
        built = sorted((self.root / "out" / "pipe").glob(f"{name}-*"))
        assert len(built) == 1, f"expected one output of pipe:{name}, found {built}"
        return built[0]


def done_markers(output: Path) -> set[str]:
    """The relative paths of the files a download output has marked done."""
    done = output / ".download" / "done"
    return {str(p.relative_to(done))[: -len(".json")] for p in done.rglob("*.json")} if done.exists() else set()


def file_log(output: Path) -> list[list[dict[str, Any]]]:
    """``.download/files.jsonl`` grouped by run, in order."""
    path = output / ".download" / "files.jsonl"
    runs: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        runs.setdefault(record["run"], []).append(record)
    return list(runs.values())
