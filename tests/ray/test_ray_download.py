"""``download`` on the Ray backend: each file is a Ray task (on the nodes of the session's real local cluster),
copying from a file server on loopback; the files, the manifest and the per-file log come out as locally. The
build is the real CLI in a child process, a driver of that cluster."""

from __future__ import annotations

import json
import subprocess

from download_ws import DownloadWorkspace, FileServer, file_log
from raycluster import node_env


def test_files_are_ray_tasks_on_the_clusters_nodes(ray_cluster, tmp_path):
    src = tmp_path / "src" / "data"
    files = {f"part-{i}.jsonl": b"".join(b'{"text": "doc %d.%d"}\n' % (i, j) for j in range(100 + i)) for i in range(8)}
    for name, data in files.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    server = FileServer(tmp_path / "src")
    try:
        ws = DownloadWorkspace(
            tmp_path / "ws",
            f"""
            load("@marinbuild//rules:download.py", "download")
            download(name = "dl", url = "{server.url}/data/", file_resources = {{"cpu": 1}})
            """,
        )
        proc = subprocess.run(
            ws.command("//pipe:dl", "--backend", "ray", "--ray_address", ray_cluster.address),
            cwd=ws.root,
            env={**ws.env(), **node_env()},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert sorted(server.fetched()) == sorted(f"/data/{name}" for name in files)
    finally:
        server.close()
    out = ws.output("dl")
    for name, data in files.items():
        assert (out / name).read_bytes() == data
    manifest = json.loads((out / "manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == sorted(files)
    (run,) = file_log(out)
    assert sorted(r["state"] for r in run) == ["fetched"] * 8
    nodes = {r["node"] for r in run}
    assert nodes <= {node.node_id for node in ray_cluster.nodes}, nodes  # Ray tasks, not local threads
