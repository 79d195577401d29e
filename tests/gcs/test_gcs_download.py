"""``download`` from gs:// into a gs:// prefix (fake-gcs-server): GCS's published md5 and crc32c checked, the
files committed and marked done in the bucket, a rerun of a built step fetching nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import google_crc32c
from download_ws import DownloadWorkspace
from gcs_pipelines import new_bucket

from marinbuild.store import fs, gcs

HERE = Path(__file__).parent


def _objects(bucket: str) -> dict[str, bytes]:
    files = {
        f"corpus/v1/shard-{i}.jsonl": b"".join(b'{"text": "doc %d.%d"}\n' % (i, j) for j in range(50 + i))
        for i in range(4)
    }
    files["corpus/v1/notes.txt"] = b"not selected\n"
    for key, data in files.items():
        gcs.filesystem().pipe_file(f"{bucket}/{key}", data)
    return files


def test_a_gcs_folder_is_copied_with_its_published_md5_and_crc32c_checked(tmp_path, gs_prefix):
    source = new_bucket()
    files = _objects(source)
    ws = DownloadWorkspace(
        tmp_path / "ws",
        f"""
        load("@marinbuild//rules:download.py", "download")
        download(name = "dl", url = "gs://{source}/corpus/v1/", patterns = ["*.jsonl"], workers = 2)
        """,
    )
    result = ws.build("//pipe:dl", "--prefix", gs_prefix)
    assert result.code == 0, result.stderr[-3000:]
    outs = gcs.filesystem().glob(f"{gs_prefix.split('://', 1)[1]}/pipe/dl-*")
    assert len(outs) == 1, outs
    out = "gs://" + outs[0]
    manifest = json.loads(fs.read_bytes(f"{out}/manifest.json"))
    wanted = sorted(k.split("/", 2)[2] for k in files if k.endswith(".jsonl"))
    assert [f["path"] for f in manifest["files"]] == wanted
    for record in manifest["files"]:
        data = files[f"corpus/v1/{record['path']}"]
        assert fs.read_bytes(f"{out}/{record['path']}") == data
        assert record["md5"] == hashlib.md5(data).hexdigest()  # what GCS publishes, checked while copying
        assert record["crc32c"] == google_crc32c.value(data).to_bytes(4, "big").hex()
        assert record["source"] == f"gs://{source}/corpus/v1/{record['path']}"
        marker = json.loads(fs.read_bytes(f"{out}/.download/done/{record['path']}.json"))
        assert marker == record
    assert not [p for p in gcs.filesystem().find(outs[0]) if ".partial-" in p]

    again = ws.build("//pipe:dl", "--prefix", gs_prefix)
    assert again.code == 0 and "0 built" in again.stdout, again.stdout


def test_done_markers_in_a_bucket_spare_a_second_copy(tmp_path, gs_prefix):
    """The download's work run twice on one gs:// output: the second lists the markers, fetches nothing."""
    from marinbuild.ml.download import download
    from marinbuild.ml.jsonl import read_records

    source = new_bucket()
    _objects(source)
    out = f"{gs_prefix}/dl"
    payload = {
        "output_path": out,
        "label": "//t:dl",
        "hf_dataset": None,
        "revision": None,
        "url": f"gs://{source}/corpus/v1/",
        "patterns": ["*.jsonl"],
        "checksums": {},
        "subdir": "",
        "endpoint": None,
        "workers": 2,
        "file_resources": None,
    }
    first = download(payload)
    assert (first["fetched"], first["cached"]) == (4, 0)
    gcs.filesystem().rm_file(f"{out.split('://', 1)[1]}/.download/done/shard-2.jsonl.json")  # as if killed before
    second = download(payload)
    assert (second["fetched"], second["cached"]) == (1, 3)
    runs: dict[str, list] = {}
    for line in read_records(f"{out}/.download/files.jsonl"):
        runs.setdefault(line["run"], []).append(line)
    last = list(runs.values())[-1]
    assert {r["path"] for r in last if r["state"] == "fetched"} == {"shard-2.jsonl"}
