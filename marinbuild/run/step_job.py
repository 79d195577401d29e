"""Running one step safely: take its lease, run it, commit outputs before status.

The protocol, in order:
1. take the lease (or wait for the runner that holds it and use its result);
2. re-read the status under the lease (someone may have finished meanwhile);
3. write RUNNING and the step's ``.executor_info``;
4. run the step; the lease keeper renews the lease meanwhile;
5. describe the outputs (a manifest: size and xxh3-128 of every file, hashed while the lease
   keeper still renews the lease), fail on a path-hash collision, confirm the lease is still
   ours, then write the action-cache record holding the manifest
   (``.marinbuild_action.<sha256>.json``), ``.artifact.json``, then SUCCESS (or FAILED), then
   release the lease.
A runner that loses its lease writes nothing more: the step belongs to the new holder.
A crash anywhere before 5 leaves RUNNING with a lease that goes stale, never SUCCESS; a reader
never sees SUCCESS without the complete outputs and their manifest.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marinbuild.run import events as ev
from marinbuild.run.leases import LEASE_KEEPER, LOCAL_RUNNERS
from marinbuild.store import action_cache, fs, records
from marinbuild.store import status as st
from marinbuild.store.action_cache import ActionKey
from marinbuild.store.lease import HEARTBEAT_INTERVAL, STALE_AFTER, LeaseLostError, lease_for

# Outcomes of a job
RAN = "ran"
CACHED = "cached"


class StepError(Exception):
    """A step's own code raised; the original exception is the cause."""


class FailedElsewhereError(Exception):
    """Another runner ran this step while we waited, and it failed."""


@dataclass
class LeaseSettings:
    heartbeat_interval: float = HEARTBEAT_INTERVAL
    stale_after: float = STALE_AFTER
    max_poll_interval: float = 2.0
    """Waiting on a runner in another process has no event to wait on: poll, backing off to this."""


class StepJob:
    """One step to run: its identity, its resolved call, and how to record it."""

    def __init__(
        self,
        *,
        name: str,
        output_path: str,
        call: Callable[[], Any],
        info_text: Callable[[], str],
        worker_id: str,
        bus: ev.EventBus,
        settings: LeaseSettings,
        cancel: threading.Event,
        action: ActionKey,
    ):
        self.name = name
        self.action = action
        """The step's version identity, for its action-cache record."""
        self.output_path = output_path
        self.call = call
        self.info_text = info_text
        self.worker_id = worker_id
        self.bus = bus
        self.settings = settings
        self.cancel = cancel
        self.lease = lease_for(output_path, worker_id, settings.stale_after)
        self._lost: BaseException | None = None
        self._token: threading.Event | None = None

    # -- phase 1-3: acquire ---------------------------------------------------------------
    def acquire(self) -> bool:
        """True if we now hold the lease and must run; False if the step is already built."""
        announced = False
        delay = 0.05
        while True:
            if self.cancel.is_set():
                raise KeyboardInterrupt
            if self.lease.try_acquire():
                self._token = LOCAL_RUNNERS.started(self.lease.path)
                try:
                    if st.read_status(self.output_path) == st.STATUS_SUCCESS:
                        self._release()
                        return False
                    if not self.lease.makes_output_folder:
                        fs.makedirs(self.output_path)
                    st.write_status(self.output_path, st.STATUS_RUNNING)
                    records.write_info(self.output_path, self.info_text())
                except BaseException:
                    self._release()
                    raise
                return True
            holder = self.lease.holder()
            if not announced and holder is not None:
                self.bus.emit(ev.WAITING, step=self.name, output_path=self.output_path,
                              detail=f"lease held by {holder.worker_id}")
                announced = True
            local = LOCAL_RUNNERS.event_for(self.lease.path)
            if local is not None:
                local.wait()
            else:
                self.cancel.wait(delay)
                delay = min(delay * 2, self.settings.max_poll_interval)
            status = st.read_status(self.output_path)
            if status == st.STATUS_SUCCESS:
                return False
            failed = status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED)
            if failed and announced and self.lease.held_by_other_live() is None:
                who = holder.worker_id if holder is not None else "another runner"
                raise FailedElsewhereError(f"{self.name} failed in runner {who} while this build waited for it")

    # -- phase 4: run ---------------------------------------------------------------------
    def begin(self) -> None:
        """The step starts running (here or on a remote worker): keep its lease alive meanwhile."""
        LEASE_KEEPER.add(self.lease, self.settings.heartbeat_interval, self._on_lost)
        self.bus.emit(ev.STARTED, step=self.name, output_path=self.output_path)

    def fail(self, exc: BaseException) -> BaseException:
        """The step's code raised ``exc``: record FAILED (if the lease is still ours); the error to report."""
        self._fail()
        if isinstance(exc, Exception) and not isinstance(exc, StepError):
            error = StepError(f"{self.name}: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            return error
        return exc

    def run(self) -> Any:
        """Run the step in this thread (the local backend)."""
        self.begin()
        try:
            return self.call()
        except BaseException as exc:
            error = self.fail(exc)
            if error is exc:
                raise
            raise error from exc

    # -- phase 5: commit ------------------------------------------------------------------
    def commit(self, result: Any) -> None:
        from marinbuild.store.manifest import build_manifest

        try:
            self._raise_if_lost()
            action_cache.check_before_commit(self.output_path, self.action)
            manifest = build_manifest(self.output_path)  # may take a while: the lease keeper still renews
            LEASE_KEEPER.remove(self.lease)
            self._raise_if_lost()
            self.lease.confirm()  # raises if another runner took the lease over
            action_cache.write_record(action_cache.new_record(self.output_path, self.action, manifest,
                                                              self.worker_id))
            records.write_artifact(self.output_path, result)
            st.write_status(self.output_path, st.STATUS_SUCCESS)
        finally:
            LEASE_KEEPER.remove(self.lease)
            self._release()

    def _raise_if_lost(self) -> None:
        if self._lost is not None:
            raise LeaseLostError(f"{self.name}: lease lost while running; not marking it built") from self._lost

    def run_here(self) -> str:
        """All phases in this thread; ``RAN`` or ``CACHED``."""
        if not self.acquire():
            return CACHED
        result = self.run()
        self.commit(result)
        return RAN

    def abandon(self) -> None:
        """The build was interrupted: give the lease up so the next build can take the step over at once."""
        self._lost = KeyboardInterrupt("build interrupted")
        LEASE_KEEPER.remove(self.lease)
        self._release()

    def _on_lost(self, exc: BaseException) -> None:
        self._lost = exc

    def _fail(self) -> None:
        """Write FAILED if the lease is still ours, then release it."""
        LEASE_KEEPER.remove(self.lease)
        try:
            if self._lost is None:
                self.lease.refresh()
                st.write_status(self.output_path, st.STATUS_FAILED)
        except LeaseLostError as exc:
            self._lost = exc
        finally:
            self._release()

    def _release(self) -> None:
        try:
            self.lease.release()
        finally:
            if self._token is not None:
                LOCAL_RUNNERS.finished(self.lease.path, self._token)
                self._token = None

