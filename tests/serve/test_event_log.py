"""The event logs builds write and the tail that feeds the live pages, in-process on real files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from marinbuild.run import events as ev
from marinbuild.serve.live import follow
from marinbuild.ui import event_log


def test_a_log_keeps_the_newest_and_leaves_out_planned_cached_and_progress(tmp_path: Path) -> None:
    folder = tmp_path / "events"
    folder.mkdir()
    for i in range(event_log.KEEP + 5):
        (folder / f"20200101T0000{i:03d}-1.jsonl").write_text("")
    log = event_log.EventLog(folder, ["//x:y"], "/prefix")
    for kind in (ev.PLANNED, ev.CACHED, ev.PROGRESS, ev.STARTED, ev.SUCCEEDED):
        log(ev.Event(kind, step="x/y", output_path="/prefix/x/y-123456"))
    log.close()
    logs = event_log.list_logs(folder)
    assert len(logs) == event_log.KEEP and logs[0] == log.path  # newest first; the oldest were deleted
    read = event_log.read_log(log.path)
    assert read is not None and read.prefix == "/prefix" and read.header["patterns"] == ["//x:y"]
    assert [e["kind"] for e in read.events] == [ev.STARTED, ev.SUCCEEDED]
    assert read.summary()["ran"] == ["x/y"] and not read.summary()["finished"]


def test_a_cut_off_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"kind": "run", "prefix": "/p"}) + "\n" + '{"kind": "started", "st')
    read = event_log.read_log(path)
    assert read is not None and read.events == []


def test_follow_yields_what_builds_against_the_prefix_append(tmp_path: Path) -> None:
    old = tmp_path / "1-old.jsonl"
    old.write_text(json.dumps({"kind": "run", "prefix": "/p"}) + "\n" + json.dumps({"kind": "started"}) + "\n")

    async def scenario() -> list[dict]:
        stream = follow(tmp_path, "/p", interval=0.01, keepalive=3600)
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)  # the generator runs to its first await: the tail has noted the sizes
        with open(old, "a") as f:
            f.write(json.dumps({"kind": "succeeded", "n": 1}) + "\n" + '{"kind": "fai')  # a line being written
        (tmp_path / "2-other.jsonl").write_text(
            json.dumps({"kind": "run", "prefix": "/elsewhere"}) + "\n" + json.dumps({"kind": "started", "n": 0}) + "\n"
        )
        got = [await first]
        with open(old, "a") as f:
            f.write('led", "n": 2}\n')
        (tmp_path / "3-new.jsonl").write_text(
            json.dumps({"kind": "run", "prefix": "/p"}) + "\n" + json.dumps({"kind": "started", "n": 3}) + "\n"
        )
        while len(got) < 3:
            got.append(await stream.__anext__())
        await stream.aclose()
        return got

    got = asyncio.run(scenario())
    assert [(r["kind"], r["n"], r["run"]) for r in got] == [
        ("succeeded", 1, "1-old"),
        ("failed", 2, "1-old"),
        ("started", 3, "3-new"),
    ]


FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from marinbuild.run import events as ev
from marinbuild.ui import event_log

log = event_log.open_event_log(Path(sys.argv[1]), ["//x:y"], "/prefix")
header = log.path.stat().st_size
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as on a full disk
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (header, hard))
log(ev.Event(ev.STARTED, step="x/y", output_path="/prefix/x/y-123456"))  # fails: the log stops
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
log(ev.Event(ev.SUCCEEDED, step="x/y", output_path="/prefix/x/y-123456"))  # the disk has room again: still stopped
log.close()
print(log.path)
"""


def test_a_log_that_cannot_be_written_never_fails_the_build(tmp_path: Path) -> None:
    blocked = tmp_path / "cache"
    blocked.write_text("a file where the .marinbuild folder would be")
    assert event_log.open_event_log(blocked, ["//x:y"], "/prefix") is None
    # a disk that fills up after the log opened: a real write failure, in a process of its own (a file size limit)
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(tmp_path / "ok")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr  # no exception
    read = event_log.read_log(done.stdout.strip())
    assert read is not None and read.prefix == "/prefix" and read.events == []  # the header only: the log stopped
