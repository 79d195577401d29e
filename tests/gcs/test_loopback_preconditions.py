"""The loopback proxy's ``preconditions`` setting (``running_server(preconditions=True)``): ``ifGenerationMatch``
on simple uploads answered as GCS answers it, which the installed fake-gcs-server ignores and tensorstore's OCDBT
checkpoints written by several processes need (the tootsie rehearsal runs behind it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from fakegcs import running_server, seed_folder


def upload(url: str, data: bytes, if_generation: int | None) -> tuple[int, int | None]:
    """A simple (``uploadType=media``) upload of object ``x``: (status, the generation written)."""
    condition = "" if if_generation is None else f"&ifGenerationMatch={if_generation}"
    request = urllib.request.Request(
        f"{url}/upload/storage/v1/b/pre/o?uploadType=media&name=x{condition}", data=data, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, int(json.loads(response.read())["generation"])
    except urllib.error.HTTPError as error:
        return error.code, None


def test_a_simple_upload_at_the_wrong_generation_is_refused_with_412(tmp_path):
    with running_server(seed_folder(tmp_path, "pre", ["seed"]), preconditions=True) as url:
        status, first = upload(url, b"one", 0)
        assert status == 200 and first
        assert upload(url, b"two", 0) == (412, None)  # it exists now: a second creator loses
        assert upload(url, b"two", first + 1)[0] == 412
        status, second = upload(url, b"two", first)
        assert status == 200 and second != first
        assert upload(url, b"three", None)[0] == 200  # no precondition: written whatever the generation
        with urllib.request.urlopen(f"{url}/download/storage/v1/b/pre/o/x?alt=media", timeout=10) as response:
            assert response.read() == b"three"


def read(url: str, if_not: int | None = None, if_match: int | None = None) -> int:
    """A read of object ``x``'s content under generation conditions: the HTTP status."""
    conditions = "".join(
        f"&{name}={value}"
        for name, value in (("ifGenerationNotMatch", if_not), ("ifGenerationMatch", if_match))
        if value is not None
    )
    try:
        with urllib.request.urlopen(f"{url}/storage/v1/b/pre/o/x?alt=media{conditions}", timeout=10) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_a_read_under_a_generation_condition_is_answered_as_gcs_answers_it(tmp_path):
    with running_server(seed_folder(tmp_path, "pre", ["seed"]), preconditions=True) as url:
        _, first = upload(url, b"one", 0)
        assert first is not None
        assert read(url, if_not=first) == 304  # not modified since the generation the reader has
        assert read(url, if_not=first + 1) == 200
        assert read(url, if_match=first) == 200
        assert read(url, if_match=first + 1) == 412


WRITER = """
import asyncio, sys
import numpy as np
import tensorstore as ts

bucket, process, processes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
base = {"driver": "gcs", "bucket": bucket, "path": "ckpt"}
grid = {"name": "regular", "configuration": {"chunk_shape": [8, 4]}}


def spec(k):
    metadata = {"shape": [8 * processes, 4], "data_type": "float32", "chunk_grid": grid}
    return {"driver": "zarr3", "kvstore": {"driver": "ocdbt", "base": base, "path": f"a{k}"}, "metadata": metadata}


async def write():
    commits = []
    for k in range(20):  # levanter writes each array of a checkpoint as its own OCDBT transaction
        array = await ts.open(spec(k), create=True, open=True)
        commits.append(array[8 * process : 8 * (process + 1)].write(np.full((8, 4), process, np.float32)).commit)
    for commit in commits:
        await commit


async def check():
    for k in range(20):
        array = await ts.open(spec(k))
        assert ((await array.read())[:, 0] == np.repeat(np.arange(processes), 8)).all(), k


asyncio.run(write() if process >= 0 else check())
"""


def test_two_processes_commit_one_ocdbt_database_through_it(tmp_path):
    """tensorstore's OCDBT without a coordinator, as levanter's multi-host checkpoints write it: the host that loses
    a race for ``manifest.ocdbt`` re-reads it until it is newer, which needs the 304 above (without it, it re-reads
    for good and never commits)."""
    pytest.importorskip("tensorstore")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    with running_server(seed_folder(tmp_path / "data", "pre", ["seed"]), preconditions=True) as url:
        env = dict(os.environ, TENSORSTORE_GCS_HTTP_URL=url, GOOGLE_AUTH_TOKEN_FOR_TESTING="x")
        writers = [
            subprocess.Popen([sys.executable, str(script), "pre", str(p), "2"], env=env, stderr=subprocess.PIPE)
            for p in range(2)
        ]
        try:
            codes = [w.wait(timeout=90) for w in writers]
        finally:
            for w in writers:
                w.kill()
        assert codes == [0, 0], [w.stderr.read().decode()[-2000:] for w in writers if w.stderr]
        subprocess.run([sys.executable, str(script), "pre", "-1", "2"], env=env, check=True, timeout=60)
