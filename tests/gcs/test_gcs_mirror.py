"""``mirror://``: a copy between two buckets, once, charged to a budget that is enforced."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Any

import fsspec
import gcs_pipelines as gp
import pytest
from gcs_pipelines import new_bucket

from marinbuild.executor import ExecutorStep, StepFailedError, mirrored, this_output_path, versioned
from marinbuild.store import gcs, mirror, records
from marinbuild.store import status as st
from marinbuild.store.mirror import TransferBudgetExceeded, mirror_budget

MB = 1 << 20


@pytest.fixture
def buckets(gcs):
    local, region = f"gs://{new_bucket()}/marin", f"gs://{new_bucket()}/marin"
    mirror.configure(local_prefix=local, remote_prefixes=[region])
    try:
        yield local, region
    finally:
        mirror.configure()


def _put(url: str, data: bytes) -> None:
    gcs.filesystem().pipe_file(url, data)


def test_mirror_copies_once_and_charges_the_budget(buckets):
    local, region = buckets
    data = bytes(range(256)) * (4 * 1024)  # 1 MiB
    _put(f"{region}/documents/x.jsonl", data)
    with mirror_budget(0.01) as budget:  # ~10 MiB
        with fsspec.open("mirror://documents/x.jsonl", "rb") as f:
            assert f.read() == data
        assert budget.bytes_used == len(data)
        assert gcs.filesystem().cat_file(f"{local}/documents/x.jsonl") == data  # copied home
        assert fsspec.filesystem("mirror").cat_file("documents/x.jsonl") == data
        assert budget.bytes_used == len(data)  # the second read is local: no charge
        assert fsspec.filesystem("mirror").exists("documents/x.jsonl")
        assert not fsspec.filesystem("mirror").exists("documents/nope")


def test_a_copy_over_the_budget_raises_and_copies_nothing(buckets):
    local, region = buckets
    _put(f"{region}/documents/big.bin", b"\0" * (2 * MB))
    with mirror_budget(1 / 1024), pytest.raises(TransferBudgetExceeded, match="budget exceeded.*documents/big.bin"):
        fsspec.open("mirror://documents/big.bin", "rb").open()
    assert not gcs.filesystem().exists(f"{local}/documents/big.bin")
    err = TransferBudgetExceeded(1, 2, 3, "p")
    import pickle

    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_the_environment_sets_the_default_budget(buckets):
    """``$MARIN_MIRROR_BUDGET_GB`` (read once per process, on first use) bounds what a fresh process copies outside
    any scope; each run is its own process, as a build's is."""
    local, region = buckets
    _put(f"{region}/documents/y.bin", b"\1" * MB)
    read = (
        "import fsspec, marinbuild.store.mirror as m\n"
        "try:\n"
        "    print(len(fsspec.filesystem('mirror').cat_file('documents/y.bin')), m.default_budget().bytes_used)\n"
        "except m.TransferBudgetExceeded as exc:\n"
        "    print('refused:', exc)\n"
    )

    def run(budget_gb: str) -> str:
        env = {**os.environ, "MARIN_PREFIX": local, mirror.MARIN_MIRROR_PREFIXES: region}
        env[mirror.MARIN_MIRROR_BUDGET_GB] = budget_gb
        done = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert run(str(0.5 / 1024)).startswith("refused: ")
    assert "$MARIN_MIRROR_BUDGET_GB" in run(str(0.5 / 1024))
    assert run("1") == f"{MB} {MB}"


def test_concurrent_readers_copy_once(buckets):
    local, region = buckets
    files = {f"documents/dir/part-{i}": bytes([i]) * (64 * 1024) for i in range(3)}
    for rel, data in files.items():
        _put(f"{region}/{rel}", data)
    charged: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def reader() -> None:
        try:
            with mirror_budget(1) as budget:
                barrier.wait()
                assert fsspec.filesystem("mirror").info("documents/dir")["type"] == "directory"
                for rel, data in files.items():
                    assert fsspec.filesystem("mirror").cat_file(rel) == data
                charged.append(budget.bytes_used)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(charged) == sum(len(d) for d in files.values())  # the folder was copied once, by one reader
    assert sorted(fsspec.filesystem("mirror").ls("documents/dir", detail=False)) == sorted(files)


def test_a_missing_path_says_where_it_looked(buckets):
    with pytest.raises(FileNotFoundError, match="mirror://documents/none: not under the local prefix"):
        fsspec.filesystem("mirror").cat_file("documents/none")


def test_a_step_scope_sets_the_budget_and_the_local_prefix(buckets):
    from gcs_pipelines import new_bucket

    local, region = buckets
    _put(f"{region}/documents/z.bin", b"z" * MB)
    step_prefix = f"gs://{new_bucket()}/steps"
    with mirror.step_scope(0.5 / 1024, step_prefix), pytest.raises(TransferBudgetExceeded):
        fsspec.filesystem("mirror").cat_file("documents/z.bin")
    with mirror.step_scope(1, step_prefix) as budget:
        assert fsspec.filesystem("mirror").cat_file("documents/z.bin") == b"z" * MB
        assert budget.bytes_used == MB
    assert gcs.filesystem().exists(f"{step_prefix}/documents/z.bin")  # copied under the step's prefix
    assert not gcs.filesystem().exists(f"{local}/documents/z.bin")


def test_marins_own_mirror_filesystem_can_still_be_imported():
    """levanter imports Marin's rigging.filesystem, which registers mirror:// without clobbering: no clash."""
    pytest.importorskip("rigging.filesystem")
    import importlib

    importlib.import_module("rigging.filesystem")
    assert fsspec.get_filesystem_class("mirror") is mirror.MirrorFileSystem


# -- a step's own budget: the largest mirrored(path, budget_gb=...) of its config --------------------


@dataclass(frozen=True)
class MirrorStepConfig:
    output_path: Any
    inputs: Any
    """``mirrored(...)`` paths (``mirror://...`` when the step runs)."""
    rendezvous: Any = None
    """A key of ``RENDEZVOUS``: wait there for the other steps before reading and again after."""
    unread: Any = None
    """A ``mirrored(...)`` value the step does not read (its budget still counts)."""


RENDEZVOUS: dict[str, threading.Barrier] = {}


def read_mirrored(config: MirrorStepConfig) -> dict:
    """Read every input through mirror://; report what this step's budget saw."""
    barrier = RENDEZVOUS.get(config.rendezvous) if config.rendezvous else None
    if barrier is not None:
        barrier.wait(timeout=60)  # every step is inside its scope before anyone copies
    sizes = [len(fsspec.filesystem("mirror").cat_file(path.removeprefix("mirror://"))) for path in config.inputs]
    budget = mirror.active_budget()
    seen = {"sizes": sizes, "used": budget.bytes_used, "limit": budget.limit_bytes, "local": mirror.local_prefix()}
    if barrier is not None:
        barrier.wait(timeout=60)  # ...and still inside it after everyone copied
    return seen


def _mirror_step(
    name: str,
    *paths_and_budgets: tuple[str, float],
    rendezvous: str | None = None,
    unread: tuple[str, float] | None = None,
) -> ExecutorStep:
    return ExecutorStep(
        name=name,
        fn=read_mirrored,
        config=MirrorStepConfig(
            output_path=this_output_path(),
            rendezvous=rendezvous,
            inputs=[mirrored(versioned(path), budget_gb=budget_gb) for path, budget_gb in paths_and_budgets],
            unread=mirrored(unread[0], budget_gb=unread[1]) if unread else None,
        ),
    )


def _causes(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


class ProcessBudget:
    """The process-wide budget (``$MARIN_MIRROR_BUDGET_GB``, 10 GB by default: every copy of these tests fits) and
    what was charged to it since the test began."""

    def __init__(self) -> None:
        self.budget = mirror.default_budget()
        self.before = self.budget.bytes_used

    @property
    def charged(self) -> int:
        return self.budget.bytes_used - self.before


@pytest.fixture
def process_budget() -> ProcessBudget:
    return ProcessBudget()


def test_each_step_is_charged_to_the_largest_budget_of_its_own_config(buckets, process_budget):
    local, region = buckets
    _put(f"{region}/documents/a.bin", b"a" * MB)
    _put(f"{region}/documents/b.bin", b"b" * MB)
    # its largest budget is 2 MiB (that of the value it reads alone would refuse the copy): succeeds
    roomy = _mirror_step("mirror/roomy", ("documents/a.bin", 0.1 / 1024), unread=("documents/unused", 2 / 1024))
    # its own budget is 0.5 MiB: fails, though the process-wide budget would have allowed the copy
    tight = _mirror_step("mirror/tight", ("documents/b.bin", 0.5 / 1024))
    ex = gp.executor(local)
    with pytest.raises(StepFailedError) as info:
        ex.run([roomy, tight])
    assert list(info.value.failures) == ["mirror/tight"]
    exceeded = [e for e in _causes(info.value.failures["mirror/tight"]) if isinstance(e, TransferBudgetExceeded)]
    assert exceeded, f"not a TransferBudgetExceeded: {info.value.failures['mirror/tight']!r}"
    assert exceeded[0].limit == int(0.5 / 1024 * mirror.GB) and exceeded[0].attempted == MB
    assert "documents/b.bin" in str(exceeded[0]) and "this step's budget (mirrored(..., budget_gb=" in str(exceeded[0])
    assert "mirror/tight" in str(info.value.failures["mirror/tight"])

    seen = records.read_artifact(ex.output_paths[roomy])
    assert seen == {"sizes": [MB], "used": MB, "limit": int(2 / 1024 * mirror.GB), "local": local}
    assert st.read_status(ex.output_paths[roomy]) == st.STATUS_SUCCESS
    assert st.read_status(ex.output_paths[tight]) == st.STATUS_FAILED
    assert gcs.filesystem().exists(f"{local}/documents/a.bin")  # copied home, under the build's prefix
    assert not gcs.filesystem().exists(f"{local}/documents/b.bin")  # refused before copying anything
    assert process_budget.charged == 0  # neither step was charged to the process-wide budget


def test_steps_running_at_once_keep_separate_budgets(buckets, process_budget):
    local, region = buckets
    for name in "cd":
        _put(f"{region}/documents/{name}.bin", name.encode() * MB)
    # one shared budget of 1.5 MiB (or 1.75) would refuse the second 1 MiB copy; two budgets allow both
    RENDEZVOUS["pair"] = threading.Barrier(2)
    c = _mirror_step("mirror/c", ("documents/c.bin", 1.5 / 1024), rendezvous="pair")
    d = _mirror_step("mirror/d", ("documents/d.bin", 1.75 / 1024), rendezvous="pair")
    try:
        ex = gp.executor(local)
        ex.run([c, d], max_concurrent=2)
    finally:
        RENDEZVOUS.pop("pair")
    assert sorted(s.name for s in ex.outcome.ran) == ["mirror/c", "mirror/d"]
    assert records.read_artifact(ex.output_paths[c]) == {
        "sizes": [MB],
        "used": MB,
        "limit": int(1.5 / 1024 * mirror.GB),
        "local": local,
    }
    assert records.read_artifact(ex.output_paths[d]) == {
        "sizes": [MB],
        "used": MB,
        "limit": int(1.75 / 1024 * mirror.GB),
        "local": local,
    }
    assert process_budget.charged == 0
    assert mirror.active_budget() is process_budget.budget  # the scopes ended with their steps


def test_a_step_without_mirrored_values_is_charged_to_the_process_wide_budget(buckets, process_budget):
    local, region = buckets
    _put(f"{region}/documents/e.bin", b"e" * MB)
    plain = ExecutorStep(
        name="mirror/plain",
        fn=read_mirrored,
        config=MirrorStepConfig(output_path=this_output_path(), inputs=["mirror://documents/e.bin"]),
    )
    ex = gp.executor(local)
    ex.run([plain])
    seen = records.read_artifact(ex.output_paths[plain])
    assert seen == {"sizes": [MB], "used": MB, "limit": process_budget.budget.limit_bytes, "local": local}
    assert process_budget.charged == MB


def test_a_ray_task_runs_its_step_in_the_steps_scope(buckets, process_budget):
    """The worker side of the Ray backend (``run_step``, called here without Ray) opens the step's scope."""
    from marinbuild.run.ray_task import run_step
    from marinbuild.run.step_call import MirrorScope

    local, region = buckets
    _put(f"{region}/documents/f.bin", b"f" * MB)
    config = MirrorStepConfig(output_path=f"{local}/out", inputs=["mirror://documents/f.bin"])
    with pytest.raises(TransferBudgetExceeded, match="this step's budget"):
        run_step(read_mirrored, config, None, MirrorScope(0.5 / 1024, local))
    seen = run_step(read_mirrored, config, None, MirrorScope(1.25 / 1024, local))
    assert seen == {"sizes": [MB], "used": MB, "limit": int(1.25 / 1024 * mirror.GB), "local": local}
    assert process_budget.charged == 0


def test_a_failed_copy_gives_back_the_bytes_it_did_not_copy(buckets, proxy):
    """The bucket refuses the third file of a folder copy (a real 403 from the proxy in front of the server):
    the copy fails, keeps the two files it copied, and charges only them; the retry copies only the third."""
    local, region = buckets
    for i in range(3):
        _put(f"{region}/documents/parts/p{i}", bytes([i]) * MB)
    proxy.activate()
    proxy.configure(forbid="parts%2Fp2")  # every request naming documents/parts/p2 (its copy) is refused
    with mirror_budget(1) as budget:
        with pytest.raises(OSError, match="Forbidden"):
            fsspec.filesystem("mirror").info("documents/parts")  # the folder: copied file by file, in order
        assert budget.bytes_used == 2 * MB  # the third file was charged, then given back
        assert sorted(gcs.filesystem().ls(f"{local}/documents/parts", detail=False)) == [
            f"{local}/documents/parts/p0".removeprefix("gs://"),
            f"{local}/documents/parts/p1".removeprefix("gs://"),
        ]
        proxy.configure(forbid="")
        assert fsspec.filesystem("mirror").info("documents/parts")["type"] == "directory"
        assert budget.bytes_used == 3 * MB  # the retry copied (and charged) only the missing file
    assert gcs.filesystem().cat_file(f"{local}/documents/parts/p2") == bytes([2]) * MB
