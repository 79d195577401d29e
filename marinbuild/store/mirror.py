"""The ``mirror://`` filesystem: read a path from whichever regional prefix holds it, copying it home once.

``mirror://x`` is ``x`` under the local prefix if there, else under the first remote prefix holding it, copied home
under a lease (``<local>/.mirror_locks/<path>``: a second reader waits for the copy), every byte charged to a
``TransferBudget`` first (``TransferBudgetExceeded`` copies nothing). Folders are copied file by file with an
``.incomplete`` marker until the last, so an interrupted copy is completed, never taken for whole. Writes go to the
local prefix.

Configuration (Marin's names): the local prefix is the running step's (``step_scope``), else
``configure(local_prefix=...)``, ``$MARIN_PREFIX``, ``/tmp/marin``; remote prefixes ``configure(remote_prefixes=...)``,
``$MARIN_MIRROR_PREFIXES``, else Marin's regional buckets for a GCS local prefix. The budget: ``mirror_budget(gb)``'s
for a block, a step's own (its largest ``mirrored(..., budget_gb=...)``), else ``$MARIN_MIRROR_BUDGET_GB`` (10 GB);
scopes are ``contextvars``. Importing this module registers ``mirror`` with fsspec over ``rigging.filesystem``'s, and
copies inside Marin's ``mirror_budget`` are charged to it."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fsspec

from marinbuild.store import fs
from marinbuild.store.lease import HEARTBEAT_INTERVAL, STALE_AFTER, LeaseLostError, lease_path
from marinbuild.store.lease_factory import lease_for

logger = logging.getLogger("marinbuild")

MARIN_MIRROR_BUDGET_GB = "MARIN_MIRROR_BUDGET_GB"
MARIN_MIRROR_PREFIXES = "MARIN_MIRROR_PREFIXES"
DEFAULT_BUDGET_GB = 10.0
REGIONAL_BUCKETS = (
    "marin-us-central1",
    "marin-us-central2",
    "marin-us-east1",
    "marin-us-east5",
    "marin-us-west4",
    "marin-eu-west4",
)
LOCK_FOLDER = ".mirror_locks"
GB = 1 << 30


class TransferBudgetExceeded(Exception):
    """Copying ``path`` (``attempted`` bytes) would take the transfers of ``budget`` past ``limit`` bytes."""

    def __init__(self, bytes_used: int, attempted: int, limit: int, path: str, budget: str = ""):
        super().__init__(bytes_used, attempted, limit, path, budget)  # the arguments, so the exception pickles
        self.bytes_used = bytes_used
        self.attempted = attempted
        self.limit = limit
        self.path = path
        self.budget = budget

    def __str__(self) -> str:
        return (
            f"mirror transfer budget exceeded: copying {self.path} ({self.attempted / 2**20:.1f} MiB) would bring "
            f"the transfers charged to {self.budget or 'this budget'} to "
            f"{(self.bytes_used + self.attempted) / GB:.3f} GB, over its limit of {self.limit / GB:.3f} GB "
            f"({self.bytes_used / GB:.3f} GB already copied). Raise the budget (mirrored(path, budget_gb=...) "
            f"in the step's config, or ${MARIN_MIRROR_BUDGET_GB} for code with no such value) or run in the "
            f"data's region"
        )


class TransferBudget:
    """A thread-safe count of bytes copied against a limit; ``name`` says whose (for the error)."""

    def __init__(self, limit_bytes: int, name: str = ""):
        self.limit_bytes = limit_bytes
        self.name = name
        self.bytes_used = 0
        self._lock = threading.Lock()

    def charge(self, size: int, path: str) -> None:
        """Record ``size`` bytes about to be copied; raise (recording nothing) if that goes over the limit."""
        with self._lock:
            if self.bytes_used + size > self.limit_bytes:
                raise TransferBudgetExceeded(self.bytes_used, size, self.limit_bytes, path, self.name)
            self.bytes_used += size

    def refund(self, size: int) -> None:
        """Give back bytes charged for a copy that did not happen (someone else made it)."""
        with self._lock:
            self.bytes_used = max(0, self.bytes_used - size)


# Process-wide on purpose: ``$MARIN_MIRROR_BUDGET_GB`` bounds what one process copies, across builds, as Marin's
# own default budget does; a step's budget (``_budget_var``) is per call.
_process_budget: list[TransferBudget] = []
_process_budget_lock = threading.Lock()
_budget_var: contextvars.ContextVar[TransferBudget | None] = contextvars.ContextVar(
    "marinbuild_mirror_budget", default=None
)


def default_budget() -> TransferBudget:
    """The process-wide budget: ``$MARIN_MIRROR_BUDGET_GB`` (read on first use), default 10 GB."""
    with _process_budget_lock:
        if not _process_budget:
            gb = float(os.environ.get(MARIN_MIRROR_BUDGET_GB, DEFAULT_BUDGET_GB))
            name = f"the process-wide budget (${MARIN_MIRROR_BUDGET_GB}: {gb:g} GB)"
            _process_budget.append(TransferBudget(int(gb * GB), name))
        return _process_budget[0]


class _MarinBudget(TransferBudget):
    """A budget Marin's code set (``rigging.filesystem.mirror_budget``), charged through ours; never refunded."""

    def __init__(self, marin: Any):
        super().__init__(marin.limit_bytes, "the budget of Marin's rigging.filesystem.mirror_budget()")
        self.marin = marin
        self.bytes_used = marin.bytes_used

    def charge(self, size: int, path: str) -> None:
        try:
            self.marin.record(size, path)
        except Exception as exc:  # rigging's own TransferBudgetExceeded: ours, with its numbers
            raise TransferBudgetExceeded(self.marin.bytes_used, size, self.marin.limit_bytes, path, self.name) from exc
        self.bytes_used = self.marin.bytes_used


def _marin_budget() -> TransferBudget | None:
    import sys

    module = sys.modules.get("rigging.filesystem")
    context = getattr(module, "_mirror_budget_ctx", None)
    marin = context.get() if context is not None else None
    return _MarinBudget(marin) if marin is not None else None


def active_budget() -> TransferBudget:
    """This context's budget: ours (a step's, ``mirror_budget``), else Marin's ``mirror_budget``, else the process's."""
    return _budget_var.get() or _marin_budget() or default_budget()


_prefix_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("marinbuild_mirror_prefix", default=None)


@contextlib.contextmanager
def mirror_budget(budget_gb: float, name: str = "") -> Iterator[TransferBudget]:
    """Copies made by this thread (and its context) inside the block are charged to a fresh budget."""
    budget = TransferBudget(int(budget_gb * GB), name or f"the mirror_budget({budget_gb:g}) block's budget")
    token = _budget_var.set(budget)
    try:
        yield budget
    finally:
        _budget_var.reset(token)


@contextlib.contextmanager
def step_scope(budget_gb: float | None, local: str | None) -> Iterator[TransferBudget]:
    """Run a step's code with a budget of ``budget_gb`` (None: the process's) and its prefix as the local one."""
    prefix_token = _prefix_var.set(local.rstrip("/") if local else None)
    try:
        if budget_gb is None:
            yield default_budget()
        else:
            name = f"this step's budget (mirrored(..., budget_gb={budget_gb:g}), the largest in its config)"
            with mirror_budget(budget_gb, name) as budget:
                yield budget
    finally:
        _prefix_var.reset(prefix_token)


@dataclass
class _Config:
    local_prefix: str | None = None
    remote_prefixes: list[str] | None = None


_config = _Config()


def configure(local_prefix: str | None = None, remote_prefixes: list[str] | None = None) -> None:
    """Set the local prefix and the remote prefixes searched (process-wide; None: back to the default)."""
    _config.local_prefix = local_prefix.rstrip("/") if local_prefix else None
    _config.remote_prefixes = [p.rstrip("/") for p in remote_prefixes] if remote_prefixes is not None else None


def local_prefix() -> str:
    return (_prefix_var.get() or _config.local_prefix or fs.default_prefix()).rstrip("/")


def remote_prefixes() -> list[str]:
    local = local_prefix()
    if _config.remote_prefixes is not None:
        prefixes = _config.remote_prefixes
    elif os.environ.get(MARIN_MIRROR_PREFIXES):
        prefixes = [p.strip().rstrip("/") for p in os.environ[MARIN_MIRROR_PREFIXES].split(",") if p.strip()]
    elif local.startswith("gs://"):
        prefixes = [f"gs://{bucket}" for bucket in REGIONAL_BUCKETS]
    else:
        prefixes = []
    return [p for p in prefixes if p != local and not local.startswith(p + "/")]


# -- copying --------------------------------------------------------------------------------------


def _url_fs(url: str) -> tuple[Any, str]:
    return (fsspec.filesystem("file"), fs.local_path(url)) if fs.is_local(url) else (fs.filesystem_for(url), url)


def _files_under(url: str) -> dict[str, int]:
    """Relative path -> size of every file at ``url`` ('' for ``url`` itself when it is a file)."""
    filesystem, path = _url_fs(url)
    try:
        info = filesystem.info(path)
    except FileNotFoundError:
        return {}
    if info.get("type") != "directory":
        return {"": int(info.get("size") or 0)}
    base = filesystem._strip_protocol(path).rstrip("/")
    found = filesystem.find(path, detail=True)
    return {
        name[len(base) + 1 :]: int(i.get("size") or 0)
        for name, i in found.items()
        if i.get("type") != "directory" and name.startswith(base + "/")
    }


def _copy_file(src: str, dst: str) -> None:
    """Copy one file so a reader of ``dst`` sees all of it or nothing."""
    if src.startswith("gs://") and dst.startswith("gs://"):
        fs.filesystem_for(src).copy(src, dst)  # a server-side rewrite: the bytes never pass through here
        return
    src_fs, src_path = _url_fs(src)
    if fs.is_local(dst):
        target = fs.local_path(dst)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-mirror-{uuid.uuid4().hex[:8]}"
        try:
            src_fs.get_file(src_path, tmp)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return
    dst_fs, dst_path = _url_fs(dst)
    with src_fs.open(src_path, "rb") as fin, dst_fs.open(dst_path, "wb") as fout:
        while chunk := fin.read(16 << 20):
            fout.write(chunk)


def _join(prefix: str, path: str) -> str:
    return fs.join(prefix, path) if path else prefix


def mirror_path(path: str, *, wait_timeout: float = 3600.0) -> str:
    """The local URL of ``path`` (relative to the prefixes), copying it from a remote prefix if needed."""
    path = path.strip("/")
    local = local_prefix()
    local_url = _join(local, path)
    if _is_complete(local, path):
        return local_url
    for prefix in remote_prefixes():
        remote_url = _join(prefix, path)
        if fs.exists(remote_url):
            _copy_home(remote_url, local, path, wait_timeout)
            return local_url
    if fs.exists(local_url):
        return local_url  # a partial folder copy whose source is gone: what there is
    remotes = ", ".join(remote_prefixes()) or f"the remote prefixes (none configured: set ${MARIN_MIRROR_PREFIXES})"
    raise FileNotFoundError(f"mirror://{path}: not under the local prefix {local} nor under {remotes}")


def resolve_url(url: str) -> str:
    """A ``mirror://`` URL (a file, a folder or a glob) as a URL under the local prefix, the files it names copied
    home first (a glob's folder before its first wildcard, whole); any other URL as it is."""
    if not url.startswith("mirror://"):
        return url
    parts = url.removeprefix("mirror://").strip("/").split("/")
    static = next((i for i, part in enumerate(parts) if any(ch in part for ch in "*?[")), len(parts))
    return "/".join([mirror_path("/".join(parts[:static])), *parts[static:]])


def _lock_root(local: str, path: str) -> str:
    return _join(local, f"{LOCK_FOLDER}/{path}")


def _incomplete_marker(local: str, path: str) -> str:
    return fs.join(_lock_root(local, path), ".incomplete")


def _is_complete(local: str, path: str) -> bool:
    """``path`` is whole under the local prefix: a file, or a folder no copy holds the lease of nor left unfinished."""
    filesystem, p = _url_fs(_join(local, path))
    try:
        if filesystem.info(p).get("type") != "directory":
            return True
    except FileNotFoundError:
        return False
    return not fs.exists(lease_path(_lock_root(local, path))) and not fs.exists(_incomplete_marker(local, path))


def _copy_home(remote_url: str, local: str, path: str, wait_timeout: float) -> None:
    worker = f"mirror-{os.getpid()}-{threading.get_ident()}-{uuid.uuid4().hex[:6]}"
    lease = lease_for(_lock_root(local, path), worker, STALE_AFTER)
    deadline = time.monotonic() + wait_timeout
    delay = 0.05
    while not lease.try_acquire():
        if time.monotonic() > deadline:
            raise TimeoutError(f"mirror://{path}: another reader has been copying it for over {wait_timeout:.0f}s")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)
        if lease.holder() is None and _is_complete(local, path):
            return  # the other reader finished the copy
    stop = threading.Event()
    keeper = threading.Thread(target=_keep_alive, args=(lease, stop), name="marinbuild-mirror-lease", daemon=True)
    keeper.start()
    try:
        files = _files_under(remote_url)
        local_files = _files_under(_join(local, path))
        todo = {rel: size for rel, size in files.items() if local_files.get(rel) != size}
        total = sum(todo.values())
        folder = "" not in files
        if todo:
            budget = active_budget()
            budget.charge(total, remote_url)
            logger.info("mirror: copying %s (%d files, %.1f MiB) to %s", remote_url, len(todo), total / 2**20, local)
            if folder:
                fs.write_atomic(_incomplete_marker(local, path), remote_url.encode())
            left = total
            try:
                for rel in sorted(todo):
                    _copy_file(_join(remote_url, rel), _join(_join(local, path), rel))
                    left -= todo[rel]
            finally:
                if left:
                    budget.refund(left)  # files not copied (the copy failed): the next try charges them again
        if folder:
            fs.remove(_incomplete_marker(local, path))  # (a no-op unless this finishes an earlier copy's work)
    finally:
        stop.set()
        keeper.join()
        lease.release()


def _keep_alive(lease: Any, stop: threading.Event) -> None:
    """Renew the copy's lease while it runs, so a long copy is not mistaken for a dead one."""
    while not stop.wait(HEARTBEAT_INTERVAL):
        try:
            lease.refresh()
        except LeaseLostError:
            return
        except Exception:  # a transient store error: try again at the next beat
            continue


# -- the fsspec filesystem ----------------------------------------------------------------------------


class MirrorFileSystem(fsspec.AbstractFileSystem):
    protocol = "mirror"

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        return str(path).removeprefix("mirror://").strip("/")

    def _local(self, path: str) -> tuple[Any, str]:
        return _url_fs(_join(local_prefix(), self._strip_protocol(path)))

    def _resolved(self, path: str) -> tuple[Any, str]:
        return _url_fs(mirror_path(self._strip_protocol(path)))

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        filesystem, resolved = self._resolved(path)
        info = dict(filesystem.info(resolved, **kwargs))
        info["name"] = self._strip_protocol(path)
        return info

    def exists(self, path: str, **kwargs: Any) -> bool:
        rel = self._strip_protocol(path)
        return fs.exists(_join(local_prefix(), rel)) or any(fs.exists(_join(p, rel)) for p in remote_prefixes())

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        """The union of the local and remote listings (local entries first), names relative to the prefixes."""
        rel = self._strip_protocol(path)
        seen: dict[str, dict[str, Any]] = {}
        for prefix in [local_prefix(), *remote_prefixes()]:
            filesystem, url = _url_fs(_join(prefix, rel))
            base = filesystem._strip_protocol(_url_fs(prefix)[1]).rstrip("/")
            try:
                entries = filesystem.ls(url, detail=True)
            except FileNotFoundError:
                continue
            for entry in entries:
                name = entry["name"]
                name = name[len(base) + 1 :] if name.startswith(base + "/") else name
                if name.startswith(LOCK_FOLDER):
                    continue
                seen.setdefault(name, {**entry, "name": name})
        if not seen and not self.exists(rel):
            raise FileNotFoundError(f"mirror://{rel}")
        entries = list(seen.values())
        return entries if detail else [e["name"] for e in entries]

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            filesystem, resolved = self._resolved(path)
        else:
            filesystem, resolved = self._local(path)
            parent = resolved.rsplit("/", 1)[0]
            if parent:
                filesystem.makedirs(parent, exist_ok=True)
        kwargs.pop("autocommit", None)
        kwargs.pop("cache_options", None)
        if kwargs.get("block_size") is None:
            kwargs.pop("block_size", None)
        return filesystem.open(resolved, mode, **kwargs)

    def cat_file(self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        filesystem, resolved = self._resolved(path)
        return filesystem.cat_file(resolved, start=start, end=end, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        filesystem, local = self._local(path)
        filesystem.makedirs(local, exist_ok=exist_ok)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        self.makedirs(path, exist_ok=True)

    def rm_file(self, path: str) -> None:
        filesystem, local = self._local(path)
        filesystem.rm_file(local)

    def rm(self, path: str, recursive: bool = False, maxdepth: int | None = None) -> None:
        filesystem, local = self._local(path)
        filesystem.rm(local, recursive=recursive, maxdepth=maxdepth)


def _register() -> None:
    """Make ``mirror://`` ours. Marin's ``rigging.filesystem`` registers its own when imported, refusing to
    replace another, so importing it after us (levanter does) would fail: import it first, then replace it."""
    import importlib.util

    if importlib.util.find_spec("rigging") is not None:
        try:
            import rigging.filesystem  # noqa: F401
        except Exception as exc:  # its own dependencies missing: then it cannot be imported later either
            logger.debug("rigging.filesystem not importable: %s", exc)
    fsspec.register_implementation("mirror", MirrorFileSystem, clobber=True)


_register()
