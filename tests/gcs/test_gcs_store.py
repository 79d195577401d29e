"""The GCS store on a real GCS API (fake-gcs-server): retries, generation leases, batched status reads."""

from __future__ import annotations

import time

import gcs_pipelines as gp
import pipelines as pl
import pytest

from marinbuild.store import batch, fs, gcs
from marinbuild.store import status as st


def test_transient_failures_are_retried_and_preconditions_are_not(gs_prefix, proxy):
    proxy.activate()
    path = gs_prefix + "/obj"
    proxy.configure(fail_next=3, faults=["503", "reset"])
    fs.write_atomic(path, b"hello")  # three failed attempts, then it lands
    assert fs.read_bytes(path) == b"hello"
    assert proxy.stats()["failed"] == 3

    proxy.reset()
    with pytest.raises(gcs.PreconditionFailed):
        gcs.write_if_generation(path, b"other", 0)  # exists: 412, and never retried
    assert proxy.stats()["requests"] == 1


def test_an_ambiguous_conditional_write_is_recognised(gs_prefix, proxy):
    """The create lands but its response is lost; the retry's 412 is our own write, not a lost race."""
    proxy.activate()
    path = gs_prefix + "/lease-like"
    proxy.configure(fail_next=1, faults=["reset-after"])
    generation = gcs.write_if_generation(path, b"mine-123", 0)
    assert gcs.read_with_generation(path) == (b"mine-123", generation)
    proxy.configure(fail_next=1, faults=["503-after"])
    assert gcs.delete_if_generation(path, generation) is True
    assert gcs.read_with_generation(path) is None


def test_gcs_lease_protocol(gs_prefix):
    pl.check_lease_protocol(gs_prefix + "/step-abc123", "GCSLease", stale_after=1.0)


def test_lease_race_between_threads_has_one_winner(gs_prefix):
    winners, _ = pl.race_for_lease(gs_prefix + "/raced")
    assert len(winners) == 1


def _built(gs_prefix: str, n: int, parents: int) -> tuple[object, list]:
    ex = gp.executor(gs_prefix)
    steps = [gp.step(f"many/p{i % parents}/s{i}", str(i)) for i in range(n)]
    gp.seed_built(ex, steps)
    return ex, steps


def test_noop_plan_of_built_steps_costs_a_few_listings(gs_prefix):
    n = 300
    ex, steps = _built(gs_prefix, n, parents=3)
    gcs.filesystem().requests.reset()
    ex2 = gp.executor(gs_prefix)
    ex2.run(steps)
    requests = gcs.filesystem().requests.reset()
    assert ex2.outcome.ran == [] and all(p.state == "built" for p in ex2.plan.steps.values())
    # Per chunk of steps: one listing of their statuses and one of their code records (their md5s), never a request
    # per step.
    assert requests <= 2 * 3 * (n // batch.CHUNK_STEPS + 1), requests
    assert requests < n / 20


def test_a_server_that_ignores_matchglob_is_detected(gs_prefix, monkeypatch):
    """Real GCS gets two matchGlob listings per chunk; a server that ignores the glob is noticed, results stay right,
    and later reads send one plain listing per chunk instead."""
    ex, steps = _built(gs_prefix, 30, parents=1)
    fs.write_atomic(ex.output_paths[steps[0]] + "/out.txt", b"an output, which a glob listing never returns")
    client = gcs.filesystem()
    monkeypatch.setattr(client, "match_glob", True)  # as for real GCS
    paths = [ex.output_paths[s] for s in steps]
    client.requests.reset()
    statuses = batch.read_statuses(paths)
    globbed = client.requests.reset()
    assert set(statuses.values()) == {st.STATUS_SUCCESS}
    assert all(len(statuses.actions[p]) == 1 for p in paths)
    assert client.match_glob is False  # fake-gcs-server returned names outside the glob
    again = batch.read_statuses(paths)
    assert again == statuses and again.actions == statuses.actions
    assert (globbed, client.requests.reset()) == (2, 1)


def test_scattered_steps_are_read_concurrently(gs_prefix, proxy):
    """Steps alone in their folders cost a listing each, but all in one round trip, not N."""
    n, latency = 40, 0.1
    ex, steps = _built(gs_prefix, n, parents=n)
    proxy.activate()
    proxy.configure(latency=latency)
    proxy.reset()
    start = time.monotonic()
    statuses = batch.read_statuses([ex.output_paths[s] for s in steps])
    elapsed = time.monotonic() - start
    assert set(statuses.values()) == {st.STATUS_SUCCESS}
    assert proxy.stats()["requests"] == n
    assert elapsed < n * latency / 4, elapsed


def test_plan_reads_everything_below_a_missing_step_in_one_batch(gs_prefix, proxy):
    """A chain of 30 unbuilt steps: not 30 sequential round trips to find out."""
    chain = []
    for i in range(30):
        chain.append(gp.step(f"chain/c{i}", str(i), inputs=chain[-1:]))
    proxy.activate()
    proxy.configure(latency=0.1)
    ex = gp.executor(gs_prefix)
    start = time.monotonic()
    ex.run([chain[-1]], dry_run=True)
    assert len(ex.plan.to_run) == 30
    assert time.monotonic() - start < 1.5


def test_legacy_status_is_read_by_content(gs_prefix):
    """Marin's legacy JSON-lines status cannot be told by its md5 in the listing: it is downloaded, each read."""
    ex = gp.executor(gs_prefix)
    s = gp.step("legacy/a")
    ex.compute_version(s)
    out = ex.output_paths[s]
    fs.write_atomic(
        st.status_path(out),
        b'{"date": "2024-01-01", "status": "RUNNING"}\n{"date": "2024-01-02", "status": "SUCCESS"}\n',
    )
    gcs.filesystem().requests.reset()
    assert batch.read_statuses([out])[out] == st.STATUS_SUCCESS
    first = gcs.filesystem().requests.reset()
    assert first == 2  # the step's listing, then its status
    assert batch.read_statuses([out])[out] == st.STATUS_SUCCESS
    assert gcs.filesystem().requests.reset() == first


_IMPORT_AND_ROUND_TRIP = """
import os, sys
from marinbuild.store import fs, gcs
print(os.environ.get("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "unset"))
fs.write_atomic(sys.argv[1], b"plain")
print(fs.read_bytes(sys.argv[1]).decode())
"""


@pytest.mark.parametrize("zonal", [None, "true"])
def test_importing_the_store_leaves_the_environment_alone(gs_prefix, zonal):
    """No variable is set at import; gcsfs's experimental zonal-bucket client (whose bucket-type probe stalls
    against an emulator) is not used even when a user's environment turns it on."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"}
    if zonal is not None:
        env["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = zonal
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_AND_ROUND_TRIP, gs_prefix + "/plain"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [zonal or "unset", "plain"]


def test_batched_read_runs_with_the_collector_paused(gs_prefix):
    """Parsing the listings of N steps makes many objects and no cyclic garbage; with the collector running,
    each young-generation pass (and, as the heap grows, each full one) would rescan them and the caller's own
    tables (a snapshot of a 100,000-step build). The batched read pauses it: no collection while it runs."""
    import gc

    ex, steps = _built(gs_prefix, 200, parents=1)
    paths = [ex.output_paths[s] for s in steps]
    collections: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(info["generation"])

    threshold = gc.get_threshold()
    gc.callbacks.append(count)
    gc.set_threshold(10)  # a young pass every 10 allocations: hundreds while parsing 400 listed objects
    try:
        statuses = batch.read_statuses(paths)
        during = len(collections)
    finally:
        gc.set_threshold(*threshold)
        gc.callbacks.remove(count)
    assert set(statuses.values()) == {st.STATUS_SUCCESS}
    assert during <= 2, collections  # the pause's own edges may see one


def _mixed_folder(gs_prefix: str) -> tuple[list[str], dict[str, str | None]]:
    """Twelve step folders in one parent, with outputs between their status objects: built, failed, running, empty,
    Marin's legacy JSON lines, no status at all. Returns their paths and each one's status read alone."""
    ex = gp.executor(gs_prefix)
    steps = [gp.step(f"mixed/s{i:02d}", str(i)) for i in range(12)]
    gp.seed_built(ex, steps, minimal=False)  # out.txt beside each: a plain listing returns it too
    paths = [ex.output_paths[s] for s in steps]
    client = gcs.filesystem()
    client.pipe_file(paths[2] + "/.executor_status", b"FAILED")
    client.pipe_file(paths[5] + "/.executor_status", b"RUNNING")
    client.pipe_file(paths[6] + "/.executor_status", b"")
    client.pipe_file(paths[8] + "/.executor_status", b'{"date": "2024-01-01", "status": "SUCCESS"}\n')
    client.rm(paths[10] + "/.executor_status")
    return paths, {p: st.read_status(p) for p in paths}


def test_listing_pages_that_split_step_folders_give_every_status(gs_prefix, monkeypatch):
    """Each listing page is folded in as it arrives; a page boundary inside a step folder (its status on one page,
    its action record on the next) loses nothing: a read with three objects per page gives what reading each status
    alone gives, and the records a whole-page read finds."""
    paths, alone = _mixed_folder(gs_prefix)
    assert set(alone.values()) == {st.STATUS_SUCCESS, "FAILED", "RUNNING", None}
    whole = batch.read_statuses(paths)
    client = gcs.filesystem()
    monkeypatch.setattr(batch, "PAGE_SIZE", 3)
    client.requests.reset()
    paged = batch.read_statuses(paths)
    assert client.requests.reset() >= 3 * 12 // 3  # three objects or more per folder: a dozen pages or more
    assert dict(paged) == dict(whole) == alone
    assert paged.actions == whole.actions
    assert {p: len(d) for p, d in paged.actions.items()} == dict.fromkeys(paths, 1)


def test_a_folder_named_under_several_spellings_gives_each_its_status(gs_prefix):
    """A step folder may be asked for as ``gs://``, ``gcs://`` and with a trailing slash, in one read: each spelling
    gets the folder's status and action records (the listings are matched by the canonical ``gs://`` path), a
    legacy status read by content included."""
    paths, alone = _mixed_folder(gs_prefix)
    whole = batch.read_statuses(paths)
    others = [p.replace("gs://", "gcs://", 1) for p in paths[::2]] + [p + "/" for p in paths[1::2]]
    mixed = batch.read_statuses(paths[:6] + others)
    for other in others:
        canonical = "gs://" + other.split("://", 1)[1].rstrip("/")
        assert mixed[other] == alone[canonical], other
        assert mixed.actions[other] == whole.actions[canonical], other
    assert {p: mixed[p] for p in paths[:6]} == {p: alone[p] for p in paths[:6]}
    assert mixed[paths[8].replace("gs://", "gcs://", 1)] == st.STATUS_SUCCESS  # the legacy form, downloaded


def test_a_status_changed_between_reads_is_read_anew(gs_prefix):
    """Nothing answers from an earlier listing: a status rewritten between two reads (a one-word status, and Marin's
    legacy form) is read as it now is."""
    paths, _ = _mixed_folder(gs_prefix)
    first = batch.read_statuses(paths)
    assert first[paths[0]] == first[paths[8]] == st.STATUS_SUCCESS
    client = gcs.filesystem()
    client.pipe_file(paths[0] + "/.executor_status", b"FAILED")
    client.pipe_file(paths[8] + "/.executor_status", b'{"date": "2024-01-02", "status": "RUNNING"}\n')
    client.pipe_file(paths[10] + "/.executor_status", b"SUCCESS")
    second = batch.read_statuses(paths)
    assert (second[paths[0]], second[paths[8]], second[paths[10]]) == ("FAILED", "RUNNING", st.STATUS_SUCCESS)


def test_a_listing_that_fails_partway_raises_instead_of_answering_in_part(gs_prefix, proxy, monkeypatch):
    """A listing whose later page cannot be read (403 on every continuation) fails the read, naming the listing:
    the statuses of its first page are never returned as if they were all."""
    paths, _ = _mixed_folder(gs_prefix)
    monkeypatch.setattr(batch, "PAGE_SIZE", 3)
    proxy.activate()
    proxy.configure(forbid="pageToken=")
    with pytest.raises(OSError, match=r"listing gs://.*/prefix/mixed/ from .*, page 2: Forbidden"):
        batch.read_statuses(paths)
    proxy.configure(forbid="")
    assert batch.read_statuses(paths)[paths[0]] == st.STATUS_SUCCESS
