"""The loopback proxy's ``fields`` and ``replay`` settings, which ``bench/gcs_bench.py`` uses to measure a no-op as
GCS would answer it: a read's ``fields`` applied to its answer (fake-gcs-server ignores them), and a repeated read
answered from memory until something is written."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from fakegcs import running_server, seed_folder

HERE = Path(__file__).parent
BUCKET = "replay-bucket"
FIELDS = "items(name,size),nextPageToken"


def seed(root: Path, names: list[str]) -> str:
    return seed_folder(root, BUCKET, names)


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def listing(url: str, fields: str | None = None) -> dict:
    query = f"prefix=p/&fields={urllib.parse.quote(fields)}" if fields else "prefix=p/"
    return json.loads(get(f"{url}/storage/v1/b/{BUCKET}/o?{query}"))


def stats(proxy: str) -> dict:
    return json.loads(get(f"{proxy}/__proxy/stats"))


def upload(url: str, name: str, data: bytes) -> None:
    request = urllib.request.Request(
        f"{url}/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={urllib.parse.quote(name, safe='')}",
        data=data,
        method="POST",
        headers={"Content-Type": "application/octet-stream"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


@pytest.fixture
def server(tmp_path):
    with running_server(seed(tmp_path, ["p/a/.executor_status", "p/b/.executor_status"])) as url:
        yield url


def start_proxy(upstream: str, *flags: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "loopback.py"), upstream, *flags], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}"


@pytest.fixture
def proxy(server):
    proc, url = start_proxy(server, "--fields", "--replay")
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_listing_carries_only_the_fields_it_asks_for(server, proxy):
    whole = listing(server, FIELDS)  # what fake-gcs-server sends: every object's whole metadata
    assert set(whole["items"][0]) > {"name", "size"}
    cut = listing(proxy, FIELDS)
    assert cut == {
        "items": [{"name": "p/a/.executor_status", "size": "7"}, {"name": "p/b/.executor_status", "size": "7"}]
    }
    assert listing(proxy) == whole  # no fields: the whole answer


def test_a_repeated_read_is_replayed_until_a_write(server, proxy):
    first = listing(proxy, FIELDS)
    assert listing(proxy, FIELDS) == first
    assert stats(proxy)["forwarded"] == 1  # the second listing never reached the server
    upload(proxy, "p/c/.executor_status", b"SUCCESS")  # forwarded: the bucket changes
    names = [item["name"] for item in listing(proxy, FIELDS)["items"]]
    assert names == ["p/a/.executor_status", "p/b/.executor_status", "p/c/.executor_status"]
    assert stats(proxy)["forwarded"] == 3


def test_marinbuild_reads_the_same_statuses_through_the_cut_and_replayed_answers(proxy, monkeypatch):
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    from marinbuild.store import batch

    paths = [f"gs://{BUCKET}/p/a", f"gs://{BUCKET}/p/b", f"gs://{BUCKET}/p/z"]
    expected = {paths[0]: "SUCCESS", paths[1]: "SUCCESS", paths[2]: None}
    for _ in range(2):
        assert dict(batch.read_statuses(paths)) == expected
    assert stats(proxy)["requests"] > stats(proxy)["forwarded"]  # the second round was answered from memory
