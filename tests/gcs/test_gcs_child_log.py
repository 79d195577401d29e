"""A child process's log on a gs:// prefix: copied there while the child runs, appended across attempts."""

from __future__ import annotations

import threading
import time

import fsspec

from marinbuild.ml.process import run_child

CHILD = """
import json, os, sys, time
payload = json.load(open(sys.argv[1]))
print("this attempt's first line", flush=True)
while not os.path.exists(payload["go"]):
    time.sleep(0.05)
print("this attempt's last line", flush=True)
json.dump({"ok": True}, open(payload["result_path"], "w"))
"""


def test_a_running_childs_log_reaches_the_prefix_before_it_ends_and_attempts_append(gs_prefix, tmp_path):
    (tmp_path / "log_child.py").write_text(CHILD)
    go = tmp_path / "go"
    remote = f"{gs_prefix}/lm-abc/logs/train-host0.log"
    fs, path = fsspec.core.url_to_fs(remote)
    fs.pipe_file(path, b"an earlier attempt's line\n")
    result: dict = {}

    def run() -> None:
        result.update(
            run_child(
                "log_child",
                {"go": str(go)},
                log_dir=f"{gs_prefix}/lm-abc/logs",
                name="train-host0",
                env={"PYTHONPATH": str(tmp_path)},
                upload_every=0.2,
            )
        )

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 60
        seen = b""
        while b"this attempt's first line" not in seen:  # copied while the child still runs
            assert time.monotonic() < deadline, seen
            time.sleep(0.1)
            seen = fs.cat_file(path)
        assert runner.is_alive() and seen.startswith(b"an earlier attempt's line\n")
    finally:
        go.touch()
        runner.join(60)
    assert result == {"ok": True}
    fs.invalidate_cache()
    assert fs.cat_file(path).decode().splitlines() == [
        "an earlier attempt's line",
        "this attempt's first line",
        "this attempt's last line",
    ]
