"""The ``download`` rule, for real: the CLI in a child process copying from a file server and a Hub stand-in on
loopback (``download_ws``), a kill mid-download and the resume, checksum mismatches, and what reads the output.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from download_ws import DownloadWorkspace, FileServer, HubServer, done_markers, file_log, git_blob_sha1

from marinbuild.ml.checksums import Digests, mismatches
from marinbuild.ml.download_sources import matcher


def _docs(folder: Path, n: int, size: int = 2000) -> dict[str, bytes]:
    """``n`` JSON-lines files under ``folder/a`` and ``folder/b``, plus a README; their bytes by relative path."""
    files: dict[str, bytes] = {}
    for i in range(n):
        text = "".join(json.dumps({"text": f"document {i}.{j} " + "x" * (i + j)}) + "\n" for j in range(size // 40))
        files[f"{'ab'[i % 2]}/part-{i}.jsonl"] = text.encode()
    files["README.md"] = b"# a dataset\n"
    for relative, data in files.items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_bytes(data)
    return files


@pytest.fixture
def served(tmp_path):
    files = _docs(tmp_path / "src" / "data", 6)
    server = FileServer(tmp_path / "src")
    yield server, files
    server.close()


def _download_build(url: str, extra: str = "") -> str:
    return f"""
        load("@marinbuild//rules:download.py", "download")
        load("@marinbuild//rules:data.py", "raw_data")

        download(name = "dl", url = "{url}", patterns = ["**/*.jsonl"], workers = 2{extra})
        raw_data(name = "docs", downloads = [":dl"])
        """


def test_files_come_with_a_manifest_and_raw_data_reads_the_documents(tmp_path, served):
    server, files = served
    sha = hashlib.sha256(files["a/part-0.jsonl"]).hexdigest()
    ws = DownloadWorkspace(
        tmp_path / "ws", _download_build(server.url + "/data/", f', checksums = {{"a/part-0.jsonl": "sha256:{sha}"}}')
    )
    result = ws.build("//pipe:docs")
    assert result.code == 0, result.stderr[-3000:]
    out = ws.output("dl")
    documents = sorted(p for p in files if p.endswith(".jsonl"))
    for relative in documents:
        assert (out / relative).read_bytes() == files[relative]
    assert not (out / "README.md").exists()  # not matched by the pattern
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["kind"] == "download" and manifest["source"]["url"] == server.url + "/data/"
    assert [f["path"] for f in manifest["files"]] == documents
    for f in manifest["files"]:
        assert f["size"] == len(files[f["path"]]) and f["sha256"] == hashlib.sha256(files[f["path"]]).hexdigest()
        assert f["source"] == f"{server.url}/data/{f['path']}"
    provenance = json.loads((out / "provenance.json").read_text())
    assert set(provenance) == {"dataset", "version", "links", "access_time"}
    assert done_markers(out) == set(documents)
    assert not list(out.rglob("*.partial-*"))
    raw = json.loads((ws.output("docs") / "manifest.json").read_text())
    assert raw["urls"] == [str(out / p) for p in documents]

    again = ws.build("//pipe:docs")  # built: nothing runs, nothing is fetched
    assert again.code == 0 and "0 built" in again.stdout, again.stdout
    assert sorted(server.fetched()) == sorted(f"/data/{p}" for p in documents)


def test_a_killed_download_resumes_without_fetching_finished_files_again(tmp_path, served):
    server, files = served
    server.hold({"part-3.jsonl", "part-4.jsonl", "part-5.jsonl"})  # half sent, then nothing until released
    ws = DownloadWorkspace(tmp_path / "ws", _download_build(server.url + "/data/"))
    out_root = ws.root / "out" / "pipe"
    finished = {"a/part-0.jsonl", "b/part-1.jsonl", "a/part-2.jsonl"}
    proc = ws.popen("//pipe:dl")
    try:
        while proc.poll() is None:  # until the three free files are done and two held ones are partly copied
            outs = list(out_root.glob("dl-*"))
            if outs and done_markers(outs[0]) == finished and len(list(outs[0].rglob("*.partial-*"))) == 2:
                break
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out = ws.output("dl")
    assert done_markers(out) == finished, "killed before the free files were done"
    assert not (out / "manifest.json").exists()
    before = server.fetched()
    server.release()
    server.hold(set())

    again = ws.build("//pipe:dl")
    assert again.code == 0, again.stderr[-3000:]
    second = server.fetched()[len(before) :]
    assert sorted(second) == ["/data/a/part-4.jsonl", "/data/b/part-3.jsonl", "/data/b/part-5.jsonl"]
    last = file_log(out)[-1]
    assert {r["path"] for r in last if r["state"] == "cached"} == finished
    assert {r["path"] for r in last if r["state"] == "fetched"} == {
        "b/part-3.jsonl",
        "a/part-4.jsonl",
        "b/part-5.jsonl",
    }
    for relative in files:
        if relative.endswith(".jsonl"):
            assert (out / relative).read_bytes() == files[relative]
    assert not list(out.rglob("*.partial-*"))  # the killed attempt's partial copies are gone


def test_a_checksum_mismatch_names_the_file_and_marks_nothing_of_it(tmp_path, served):
    server, files = served
    wrong = "sha256:" + "0" * 64
    ws = DownloadWorkspace(
        tmp_path / "ws", _download_build(server.url + "/data/", f', checksums = {{"b/part-3.jsonl": "{wrong}"}}')
    )
    result = ws.build("//pipe:dl")
    assert result.code != 0
    out = ws.output("dl")
    text = result.stdout + result.stderr + "".join(p.read_text() for p in out.glob(".marinbuild_traceback*"))
    assert "b/part-3.jsonl" in text and "ChecksumMismatchError" in text and "sha256" in text, text[-3000:]
    assert "b/part-3.jsonl" not in done_markers(out)
    assert not (out / "b" / "part-3.jsonl").exists()
    assert not list(out.rglob("*.partial-*"))
    assert not (out / "manifest.json").exists()


@pytest.fixture
def hub():
    files = {
        "README.md": b"# small: a git blob\n",
        "data/train/a.jsonl": b"".join(json.dumps({"text": f"train {i}"}).encode() + b"\n" for i in range(20)),
        "data/train/b.jsonl": b"".join(json.dumps({"text": f"more {i}"}).encode() + b"\n" for i in range(30)),
        "data/validation/c.jsonl": b'{"text": "held out"}\n' * 10,
    }
    server = HubServer("org/tiny", files, revision="abc1234", commit="abc1234" + "f" * 33)
    yield server
    server.close()


# The hub stand-in is reached over loopback: a user's HF_HUB_OFFLINE=1 (common on offline machines) is overridden.
_ONLINE = {"HF_HUB_OFFLINE": "0", "HF_HUB_DISABLE_TELEMETRY": "1"}

_HUB_BUILD = """
    load("@marinbuild//rules:download.py", "download")
    download(name = "dl", hf_dataset = "org/tiny", revision = "abc1234",
             patterns = ["**/train/*.jsonl", "README.md"], subdir = "abc1234/huggingface.co/datasets/org/tiny",
             workers = 2{extra})
    """


def test_a_hub_dataset_at_a_revision_is_copied_and_verified(tmp_path, hub):
    ws = DownloadWorkspace(tmp_path / "ws", _HUB_BUILD.format(extra=""), env={"HF_ENDPOINT": hub.url, **_ONLINE})
    result = ws.build("//pipe:dl")
    assert result.code == 0, result.stderr[-3000:]
    out = ws.output("dl")
    root = out / "abc1234/huggingface.co/datasets/org/tiny"
    wanted = ["README.md", "data/train/a.jsonl", "data/train/b.jsonl"]
    for path in wanted:
        assert (root / path).read_bytes() == hub.files[path]
    assert not (root / "data/validation/c.jsonl").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert (
        manifest["source"]["commit"] == hub.commit and manifest["subdir"] == "abc1234/huggingface.co/datasets/org/tiny"
    )
    by_path = {f["path"]: f for f in manifest["files"]}
    assert sorted(by_path) == wanted
    assert by_path["README.md"]["git_sha1"] == git_blob_sha1(hub.files["README.md"])  # small file: git blob id
    assert by_path["data/train/a.jsonl"]["sha256"] == hashlib.sha256(hub.files["data/train/a.jsonl"]).hexdigest()
    assert sorted(hub.resolved()) == wanted  # every file fetched once, at the resolved commit
    provenance = json.loads((out / "provenance.json").read_text())
    assert provenance["dataset"] == "org/tiny" and provenance["version"] == "abc1234"


def test_a_hub_file_whose_bytes_do_not_match_its_lfs_sha256_fails_by_name(tmp_path, hub):
    hub.lie_about("data/train/b.jsonl")
    ws = DownloadWorkspace(tmp_path / "ws", _HUB_BUILD.format(extra=f', endpoint = "{hub.url}"'), env=_ONLINE)
    result = ws.build("//pipe:dl")
    assert result.code != 0
    out = ws.output("dl")
    text = result.stdout + result.stderr + "".join(p.read_text() for p in out.glob(".marinbuild_traceback*"))
    assert "data/train/b.jsonl" in text and "sha256" in text, text[-3000:]
    assert "data/train/b.jsonl" not in done_markers(out)
    assert not (out / "abc1234/huggingface.co/datasets/org/tiny/data/train/b.jsonl").exists()


def test_a_marin_download_folder_without_our_manifest_is_read_as_its_document_files(tmp_path):
    from marinbuild.ml.corpus import document_paths

    folder = tmp_path / "raw" / "dclm"
    _docs(folder / "a3b142c", 3)
    (folder / "provenance.json").write_text(json.dumps({"dataset": "x", "version": "a3b142c", "links": []}))
    assert document_paths([str(folder)]) == sorted(str(p) for p in folder.rglob("*.jsonl"))


def test_patterns_keep_fsspecs_glob_meaning():
    match = matcher(["**/train/*.jsonl.zst", "top-*.parquet"])
    assert match("arxiv/train/x.jsonl.zst") and match("train/x.jsonl.zst")
    assert not match("arxiv/validation/x.jsonl.zst") and not match("arxiv/train/sub/x.jsonl.zst")
    assert match("top-1.parquet") and not match("dir/top-1.parquet")
    assert matcher([])("anything/at/all")


def test_checksums_are_the_published_kinds():
    data = b"hello world\n" * 1000
    digests = Digests({"sha256", "git_sha1", "md5", "crc32c"}, size=len(data))
    digests.update(data[:5000])
    digests.update(data[5000:])
    got = digests.hexdigests()
    assert got["sha256"] == hashlib.sha256(data).hexdigest()
    assert got["md5"] == hashlib.md5(data).hexdigest()
    assert got["git_sha1"] == git_blob_sha1(data)
    git = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True, check=True)
    assert got["git_sha1"] == git.stdout.decode().strip()
    check = Digests({"crc32c"})
    check.update(b"123456789")
    assert check.hexdigests()["crc32c"] == "e3069283"  # the CRC-32C check value (RFC 3720)
    assert mismatches({"sha256": got["sha256"].upper()}, got) == []
    assert mismatches({"md5": "0" * 32}, got) == [f"md5 {got['md5']} != published {'0' * 32}"]


def test_a_marin_made_download_at_the_override_path_is_the_steps_output(tmp_path):
    """Marin's download step wrote files, provenance.json and SUCCESS at raw/mine: the download target with that
    override_output_path is built already (nothing fetched: its source does not even exist), and raw_data reads
    the Marin copy's document files."""
    ws = DownloadWorkspace(
        tmp_path / "ws",
        """
        load("@marinbuild//rules:download.py", "download")
        load("@marinbuild//rules:data.py", "raw_data")

        download(name = "dl", hf_dataset = "org/absent", revision = "1234567", subdir = "1234567",
                 override_output_path = "raw/mine")
        raw_data(name = "docs", downloads = [":dl"], patterns = ["*/a/*.jsonl"])
        """,
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1"},
    )
    marin = ws.root / "out" / "raw" / "mine"
    files = _docs(marin / "1234567", 4)
    (marin / "provenance.json").write_text(json.dumps({"dataset": "org/absent", "version": "1234567", "links": []}))
    (marin / ".executor_status").write_text("SUCCESS")
    result = ws.build("//pipe:docs")
    assert result.code == 0, result.stderr[-3000:]
    assert "1 built, 1 cached" in result.stdout, result.stdout
    raw = json.loads((ws.output("docs") / "manifest.json").read_text())
    assert raw["urls"] == [str(marin / "1234567" / p) for p in sorted(files) if p.startswith("a/")]
    again = ws.build("//pipe:docs")  # a no-op, answered with the override path too
    assert again.code == 0 and "0 built" in again.stdout, again.stdout
