"""The loopback proxy's ``--routes``: one bucket spread over two fake-gcs-servers, as ``bench/gcs_bench.py``
holds 100,000 steps. Each request must reach the server holding what it names, and a listing no route covers
must fail rather than return part of the bucket."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fakegcs import running_server, seed_folder

HERE = Path(__file__).parent
BUCKET = "routes-bucket"


def seed(root: Path, names: list[str]) -> str:
    return seed_folder(root, BUCKET, names)


def listing(url: str, prefix: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/storage/v1/b/{BUCKET}/o?prefix={prefix}", timeout=10) as response:
        return sorted(item["name"] for item in json.loads(response.read()).get("items", []))


@pytest.fixture
def routed(tmp_path):
    """Two servers, ``p/a/`` on one and ``p/b/`` on the other, behind the proxy; yields the proxy's URL."""
    a = seed(tmp_path / "a", ["p/a/x/.executor_status", "p/a/y/.executor_status"])
    b = seed(tmp_path / "b", ["p/b/z/.executor_status"])
    with running_server(a) as url_a, running_server(b) as url_b:
        routes = tmp_path / "routes.json"
        routes.write_text(json.dumps({"p/a/": url_a, "p/b/": url_b}))
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "loopback.py"), url_a, "--routes", str(routes)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            yield f"http://127.0.0.1:{int(proc.stdout.readline())}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def test_each_request_reaches_the_server_holding_its_folder(routed):
    assert listing(routed, "p/a/") == ["p/a/x/.executor_status", "p/a/y/.executor_status"]
    assert listing(routed, "p/b/") == ["p/b/z/.executor_status"]
    assert listing(routed, "p/b/z/") == ["p/b/z/.executor_status"]
    url = f"{routed}/download/storage/v1/b/{BUCKET}/o/p%2Fb%2Fz%2F.executor_status?alt=media"
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.read() == b"SUCCESS"


def test_a_listing_no_route_covers_fails(routed):
    with pytest.raises(urllib.error.HTTPError) as err:
        listing(routed, "p/")
    assert err.value.code == 501


def test_batched_status_reads_through_the_routes(routed, monkeypatch):
    """What the bench measures: marinbuild's batched listings (gcsfs) through the proxy see both servers."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", routed)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    from marinbuild.store import batch

    paths = [f"gs://{BUCKET}/p/a/x", f"gs://{BUCKET}/p/a/y", f"gs://{BUCKET}/p/b/z", f"gs://{BUCKET}/p/b/w"]
    statuses = batch.read_statuses(paths)
    assert dict(statuses) == {paths[0]: "SUCCESS", paths[1]: "SUCCESS", paths[2]: "SUCCESS", paths[3]: None}
