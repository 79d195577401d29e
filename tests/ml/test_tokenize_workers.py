"""Local pool workers that outlive their step (``marinbuild.ml.local_workers``): a later build claims the warm
worker of its key (same pid, its next session), a changed key gets a new one, an idle worker exits after its
timeout, a build killed mid-shard takes its workers with it, ``MARINBUILD_WORKER_IDLE=0`` keeps workers to their
step. Real CLI builds in child processes; each step's ``logs/tokenize-workers.log`` names the workers that served it.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from pathlib import Path

import pytest
from tokenize_ws import (
    TokenizeWorkspace,
    pool_workers,
    reference_rows,
    stories,
    token_rows,
    toy_tokenizer,
    worker_sessions,
    write_docs,
)

pytest.importorskip("levanter")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return toy_tokenizer(tmp_path_factory.mktemp("toy-tokenizer"))


def _workspace(tmp_path: Path, tokenizer: Path, env: dict[str, str], files: int = 2) -> TokenizeWorkspace:
    ws = TokenizeWorkspace(tmp_path / "ws", tokenizer, workers=1)
    ws.extra_env.update(env)
    for i in range(files):
        write_docs(ws.data / f"part-{i}.jsonl.gz", stories()[i * 100 : (i + 1) * 100])
    return ws


def _built(ws: TokenizeWorkspace) -> list[tuple[int, int]]:
    result = ws.build()
    assert result.code == 0, result.stderr[-4000:]
    return worker_sessions(ws.output())


def _exits(pid: int, timeout: float) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


def test_a_later_build_claims_the_warm_worker_and_a_changed_key_gets_a_new_one(tmp_path, tokenizer, warm_env):
    ws = _workspace(tmp_path, tokenizer, warm_env)
    [(pid, first)] = _built(ws)
    assert first == 1 and pool_workers(warm_env["XDG_RUNTIME_DIR"]) == [pid]  # it outlived its build
    write_docs(ws.data / "part-9.jsonl.gz", stories()[500:600])  # a new file: the step runs again
    assert _built(ws) == [(pid, 2)]  # the same process, its second step
    ws.extra_env["SOME_SETTING"] = "changed"  # the environment is part of the key
    write_docs(ws.data / "part-10.jsonl.gz", stories()[600:700])
    [(other, session)] = _built(ws)
    assert other != pid and session == 1
    assert sorted(pool_workers(warm_env["XDG_RUNTIME_DIR"])) == sorted([pid, other])


def test_an_idle_worker_exits_after_its_timeout(tmp_path, tokenizer, warm_env):
    ws = _workspace(tmp_path, tokenizer, {**warm_env, "MARINBUILD_WORKER_IDLE": "3"})
    [(pid, _)] = _built(ws)
    assert _exits(pid, timeout=60)
    assert not list(Path(warm_env["XDG_RUNTIME_DIR"]).glob("marinbuild-workers/*/*.sock"))  # it left no files


def test_without_an_idle_timeout_workers_die_with_their_step(tmp_path, tokenizer):
    ws = _workspace(tmp_path, tokenizer, {"MARINBUILD_WORKER_IDLE": "0"})
    [(pid, _)] = _built(ws)
    assert _exits(pid, timeout=10)  # it exits as its step closes its pool
    write_docs(ws.data / "part-9.jsonl.gz", stories()[500:600])
    [(again, session)] = _built(ws)
    assert again != pid and session == 1


def test_a_build_killed_mid_shard_takes_its_warm_workers_with_it(tmp_path, tokenizer, warm_env):
    """The build is SIGKILLed while both its workers, claimed warm (so both start their shard at once), are
    mid-shard: they exit (never finishing a shard for nobody, never serving the next build half-done); the next
    build makes the same tokens as levanter's builder."""
    ws = _workspace(tmp_path, tokenizer, warm_env)
    ws.set_build(workers=2)
    assert len({pid for pid, _ in _built(ws)}) == 2
    workers = pool_workers(warm_env["XDG_RUNTIME_DIR"])
    texts = stories()
    for i in (2, 3):
        write_docs(ws.data / f"part-{i}.jsonl.gz", [f"{t} ({i}, {k})" for k in range(4) for t in texts])
    before = set(ws.shard_store.glob("*/*/cache-*"))
    proc = subprocess.Popen(ws.command("//pipe:tok"), cwd=ws.root, env=ws.env(), stderr=subprocess.DEVNULL)
    while proc.poll() is None and len(set(ws.shard_store.glob("*/*/cache-*")) - before) < 2:
        time.sleep(0.05)
    assert len(workers) == 2 and proc.poll() is None, workers
    proc.kill()
    proc.communicate()
    assert all(_exits(pid, timeout=30) for pid in workers)
    served = {(pid, n) for pid, n in _built(ws) if pid not in workers}  # the log has the killed attempt's too
    assert len(served) == 2 and all(n == 1 for _, n in served), served
    files = sorted(str(f) for f in ws.data.glob("part-*.jsonl.gz"))
    assert token_rows(ws.output() / "train") == reference_rows(files, tokenizer, tmp_path / "ref")
