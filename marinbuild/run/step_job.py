"""Running one step safely: take its lease, run it, commit outputs before status.

1. take the lease (or wait for its holder and use its result); 2. re-read the status; 3. write RUNNING and
``.executor_info``; 4. run the step while the lease is renewed; 5. hash the outputs into a manifest, fail on a path-hash
collision, confirm the lease, write the action record, ``.artifact.json``, then SUCCESS (removing an old traceback),
then release. A step that raised gets ``.marinbuild_traceback.txt`` then FAILED. A runner that lost its lease writes
nothing more; a crash before 5 leaves RUNNING and a lease going stale, so no reader sees SUCCESS without outputs and
manifest. Steps 3 and 5 may run in another process for the holder (a Ray task, ``RemoteRun``), which never writes the
lease and commits only while it names the holder (``Lease.check``)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from marinbuild.run import compute, step_progress
from marinbuild.run import events as ev
from marinbuild.run.failure import FailureRecord, traceback_text
from marinbuild.store import action_cache, faults, fs, records, traceback_file
from marinbuild.store import status as st
from marinbuild.store.action_cache import ActionKey
from marinbuild.store.lease import HEARTBEAT_INTERVAL, STALE_AFTER, LeaseLostError
from marinbuild.store.lease_factory import lease_for
from marinbuild.store.manifest import build_manifest

if TYPE_CHECKING:
    from marinbuild.run.leases import BuildContext

logger = logging.getLogger("marinbuild")


class JobOutcome(Enum):
    """How a job that did not fail ended: it ran the step, or found it built (by another runner meanwhile)."""

    RAN = "ran"
    CACHED = "cached"


RAN = JobOutcome.RAN
CACHED = JobOutcome.CACHED


class Attempt(Enum):
    """What one attempt at a step's lease found (``StepJob.try_acquire``)."""

    HELD = "held"  # We hold the lease now (RUNNING written unless ``start=False``): run the step.
    BUILT = "built"  # The step is built (seen under the lease, which is released again): nothing to run.
    BUSY = "busy"  # Another runner holds a live lease: wait for it.


class StepError(Exception):
    """A step's own code raised; the original exception is the cause, ``failure`` its recorded traceback."""

    failure: FailureRecord | None = None


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
        context: BuildContext,
    ):
        self.name = name
        self.context = context  # The build this job belongs to: its lease keeper and its registry of running runners.
        self.action = action  # The step's version identity, for its action-cache record.
        self.output_path = output_path
        self.call = call
        self.info_text = info_text
        self.worker_id = worker_id
        self.bus = bus
        self.settings = settings
        self.cancel = cancel
        self.lease = lease_for(output_path, worker_id, settings.stale_after)
        self._lost: BaseException | None = None

    # -- phase 1-3: acquire ---------------------------------------------------------------
    def acquire(self, start: bool = True) -> bool:
        """True if we now hold the lease and must run; False if built. ``start=False``: the runner writes RUNNING."""
        announced = False
        delay = 0.05
        while True:
            if self.cancel.is_set():
                raise KeyboardInterrupt
            got = self.try_acquire(start)
            if got is not Attempt.BUSY:
                return got is Attempt.HELD
            try:
                holder = self.lease.holder()
            except st.DamagedFileError:
                holder = None  # not parsable (not marinbuild's): try_acquire takes it once it is stale
            if not announced and holder is not None:
                self.bus.emit(
                    ev.WAITING, step=self.name, output_path=self.output_path, detail=f"lease held by {holder.worker_id}"
                )
                announced = True
            self.cancel.wait(delay)
            delay = min(delay * 2, self.settings.max_poll_interval)
            status = st.read_status(self.output_path)
            if status == st.STATUS_SUCCESS:
                return False
            failed = status in (st.STATUS_FAILED, st.STATUS_DEP_FAILED)
            if failed and announced and self._held_by_other_live() is None:
                who = holder.worker_id if holder is not None else "another runner"
                traceback = traceback_file.existing_traceback(self.output_path)
                raise FailedElsewhereError(
                    f"{self.name} failed in runner {who} while this build waited for it"
                    + (f" (its traceback: {traceback})" if traceback else "")
                )

    def _held_by_other_live(self) -> Any:
        try:
            return self.lease.held_by_other_live()
        except st.DamagedFileError:
            return None

    def try_acquire(self, start: bool = True) -> Attempt:
        """One attempt at ``acquire``, never waiting."""
        if not self.lease.try_acquire():
            return Attempt.BUSY
        try:
            if st.read_status(self.output_path) == st.STATUS_SUCCESS:
                self._release()
                return Attempt.BUILT
            if not self.lease.makes_output_folder:
                fs.makedirs(self.output_path)
            if start:
                write_started(self.output_path, self.info_text())
        except BaseException:
            self._release()
            raise
        return Attempt.HELD

    # -- phase 4: run ---------------------------------------------------------------------
    def begin(self) -> None:
        """The step starts running (here or on a remote worker): keep its lease alive meanwhile."""
        self.context.lease_keeper.add(self.lease, self.settings.heartbeat_interval, self._on_lost)
        self.bus.emit(ev.STARTED, step=self.name, output_path=self.output_path)

    def fail(self, exc: BaseException) -> BaseException:
        """The step raised ``exc``: its traceback, then FAILED if the lease is ours; the ``StepError`` to report."""
        text = traceback_text(exc)
        path = self._fail(text)
        if isinstance(exc, Exception) and not isinstance(exc, StepError):
            error = StepError(f"{self.name}: {type(exc).__name__}: {exc}")
            error.__cause__ = exc
            error.failure = FailureRecord(text, path)
            return error
        return exc

    def run(self) -> Any:
        """Run the step in this thread (the local backend)."""
        compute.start(self.output_path, self._resources(), "local")
        self.begin()
        try:
            with step_progress.reporting(self._report_progress):
                return self.call()
        except BaseException as exc:
            error = self.fail(exc)
            if error is exc:
                raise
            raise error from exc

    def _report_progress(self, detail: str, data: dict[str, Any]) -> None:
        self.bus.emit(ev.PROGRESS, step=self.name, output_path=self.output_path, detail=detail, data=data)

    # -- phase 5: commit ------------------------------------------------------------------
    def commit(self, result: Any) -> None:
        committed = False
        try:
            self._raise_if_lost()
            described = describe_outputs(self.output_path, self.action)  # the lease keeper still renews
            self.context.lease_keeper.remove(self.lease)
            self._raise_if_lost()
            self.lease.confirm()  # raises if another runner took the lease over
            try:
                write_commit(self.output_path, self.action, described, result, self.worker_id)
            except Exception:
                if not self._committed_anyway():
                    raise
            committed = True
        finally:
            self.context.lease_keeper.remove(self.lease)
            self._release(after_commit=committed)

    def _committed_anyway(self) -> bool:
        """The commit raised: True if storage says SUCCESS anyway; else mark the step FAILED if possible, and False."""
        try:
            if st.read_status(self.output_path) == st.STATUS_SUCCESS:
                return True
            st.write_status_on_full_disk(self.output_path, st.STATUS_FAILED)
        except Exception:
            logger.warning("could not mark %s FAILED after its commit failed", self.output_path, exc_info=True)
        return False

    # -- phases 3-5 in another process (a Ray task) -----------------------------------------
    def remote_run(self) -> RemoteRun:
        """What the process running this step writes under our lease (after ``acquire(start=False)``)."""
        info, resources = self.info_text(), self._resources()
        return RemoteRun(self.output_path, self.action, info, self.worker_id, self.settings.stale_after, resources)

    def _resources(self) -> Any:
        request = getattr(self.call, "request", None)  # a StepCall's; any other callable asks for nothing
        return request()[0] if request is not None else None

    def release_after_remote(self, committed: bool = False) -> None:
        """The step's process committed (``committed``) or raised: stop renewing the lease and release it."""
        self.context.lease_keeper.remove(self.lease)
        self._release(after_commit=committed)

    def _raise_if_lost(self) -> None:
        if self._lost is not None:
            raise LeaseLostError(f"{self.name}: lease lost while running; not marking it built") from self._lost

    def run_here(self) -> JobOutcome:
        """All phases in this thread; ``RAN`` or ``CACHED``."""
        if not self.acquire():
            return CACHED
        self.commit(self.run())
        return RAN

    def abandon(self) -> None:
        """The build was interrupted: give the lease up so the next build can take the step over at once."""
        self._lost = KeyboardInterrupt("build interrupted")
        self.context.lease_keeper.remove(self.lease)
        self._release()

    def _on_lost(self, exc: BaseException) -> None:
        self._lost = exc

    def _fail(self, traceback: str) -> str | None:
        """Write the traceback then FAILED if the lease is ours, release it; the traceback file's path (or None)."""
        self.context.lease_keeper.remove(self.lease)
        path = None
        try:
            if self._lost is None:
                self.lease.refresh()
                path = write_failure_traceback(self.output_path, traceback)
                st.write_status_on_full_disk(self.output_path, st.STATUS_FAILED)
        except LeaseLostError as exc:
            self._lost = exc
            path = None
        finally:
            self._release()
        return path

    def _release(self, after_commit: bool = False) -> None:
        """Give the lease up. ``after_commit``: SUCCESS is stored, so a failure to delete the lease is only logged (a
        lease beside SUCCESS blocks nobody; ``cache verify --repair`` removes it)."""
        try:
            self.lease.release()
        except Exception:
            if not after_commit:
                raise
            logger.warning(
                "%s is committed but its lease %s could not be released", self.name, self.lease.path, exc_info=True
            )


def write_started(output_path: str, info: str) -> None:
    """Phase 3: RUNNING, then the step's ``.executor_info``."""
    st.write_status(output_path, st.STATUS_RUNNING)
    records.write_info(output_path, info)


def write_failure_traceback(output_path: str, text: str) -> str | None:
    """Before FAILED: the traceback in ``.marinbuild_traceback.txt``; its path, None if the store refused it."""
    try:
        return traceback_file.write_traceback(output_path, text)
    except Exception:
        logger.warning("could not write the traceback of the step at %s", output_path, exc_info=True)
        return None


@dataclass(frozen=True)
class Described:
    """What the commit needs from its listing of the output folder."""

    manifest: Any
    names: set[str]
    """The folder's other names: an earlier failure's ``.marinbuild_traceback.txt`` (the commit removes it before
    SUCCESS), an earlier compute record (``compute.finish`` replaces it)."""


def describe_outputs(output_path: str, action: ActionKey) -> Described:
    """Phase 5, before the lease is confirmed: the outputs' manifest, and failing on a path-hash collision (one
    listing of the folder serves both, and tells whether an earlier failure left its traceback)."""
    names: set[str] = set()
    manifest = build_manifest(output_path, names)
    action_cache.check_before_commit(output_path, action, names)
    return Described(manifest, names)


def write_commit(output_path: str, action: ActionKey, described: Described, result: Any, worker_id: str) -> None:
    """Phase 5, the lease confirmed: compute record, action record (with manifest), ``.artifact.json``, no stale
    traceback, SUCCESS."""
    compute.finish(output_path, described.names)
    action_cache.write_record(action_cache.new_record(output_path, action, described.manifest, worker_id))
    records.write_artifact(output_path, result)
    if traceback_file.TRACEBACK_FILE in described.names:
        traceback_file.remove_traceback(output_path)
    st.write_status(output_path, st.STATUS_SUCCESS)
    faults.point("committed")


class OutputFolderMissingError(Exception):
    """A process running a step for its lease holder cannot see the step's output folder (a prefix not shared)."""


@dataclass(frozen=True)
class RemoteRun:
    """Phases 3 and 5 for the lease holder, in another process (a Ray task); picklable; never writes the lease."""

    output_path: str
    action: ActionKey
    info: str  # The step's ``.executor_info`` text.
    holder: str  # The worker id of the lease holder (the driver).
    stale_after: float
    resources: Any = None
    """The step's request, for its compute record."""

    def start(self) -> bool:
        """Before the step: write RUNNING and ``.executor_info``; False if an earlier attempt already committed it."""
        if fs.is_local(self.output_path) and not os.path.isdir(fs.local_path(self.output_path)):
            raise OutputFolderMissingError(
                f"{self.output_path} (made by the driver when it took the step's lease) does not exist on "
                f"this worker: use a prefix every node shares (gs://... or a shared file system)"
            )
        if st.read_status(self.output_path) == st.STATUS_SUCCESS:
            return False
        write_started(self.output_path, self.info)
        compute.start(self.output_path, self.resources, "ray")
        return True

    def commit(self, result: Any) -> None:
        """After the step: describe the outputs, check the lease is still the holder's, then write the commit."""
        described = describe_outputs(self.output_path, self.action)
        lease_for(self.output_path, self.holder, self.stale_after).check()  # raises LeaseLostError
        write_commit(self.output_path, self.action, described, result, self.holder)
