"""Google Cloud Storage through gcsfs: one filesystem per endpoint, our retry policy, generation preconditions.

Every request goes through ``RetryingGCSFileSystem._request``: transient failures (408/429/5xx, resets, timeouts) are
retried with jittered backoff from 50 ms to 2 s, never a 412, 404 or other 4xx. An attempt fails when the server is
silent for ``REQUEST_TIMEOUT`` seconds and none starts ``RETRY_DEADLINE`` seconds after the first, so an operation ends
within ``OPERATION_BOUND`` seconds (``StoreUnreachableError``), before a hung lease renewal could let anyone take the
lease over.

A retried conditional write is ambiguous: ``write_if_generation`` and ``delete_if_generation`` re-read the object.
Listings decode three fields per object with msgspec (``Listed``); ``gcsfs`` and ``msgspec`` are imported here only;
requests to an emulator are anonymous. The filesystem subclasses ``gcsfs.core.GCSFileSystem`` by name:
``GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT`` turns ``gcsfs.GCSFileSystem`` into the zonal class, whose bucket probe stalls 60 s
a call on an emulator."""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import gcsfs.retry
import msgspec
from fsspec.asyn import sync
from gcsfs.core import GCSFileSystem

T = TypeVar("T")

RETRY_ATTEMPTS = 10
RETRY_INITIAL = 0.05
RETRY_MAX = 2.0
REQUEST_TIMEOUT = float(os.environ.get("MARINBUILD_GCS_REQUEST_TIMEOUT") or 15.0)
RETRY_DEADLINE = float(os.environ.get("MARINBUILD_GCS_RETRY_DEADLINE") or 30.0)
OPERATION_BOUND = RETRY_DEADLINE + RETRY_MAX * 1.5 + REQUEST_TIMEOUT
"""The longest one operation can take when the server never answers: the deadline, one last back-off, one attempt
(48 s by default: less than the 60 s between a lease's due renewal and its staleness, 90 s after the last one)."""

_RAW_REQUEST = GCSFileSystem._request.__wrapped__  # one attempt, without gcsfs's retry decorator


class StoreUnreachableError(ConnectionError):
    """GCS (or the emulator) did not answer an operation within ``OPERATION_BOUND`` seconds; names it and the object."""


class _Attempts:
    """The retry budget of one operation: ``RETRY_ATTEMPTS`` attempts, none started after ``RETRY_DEADLINE``."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.start = time.monotonic()
        self.attempt = 0

    async def failed(self, exc: BaseException) -> None:
        """After a failed attempt: back off if another is allowed; else raise (``StoreUnreachableError``: transient)."""
        if not is_transient(exc):
            raise exc
        delay = min(RETRY_MAX, RETRY_INITIAL * (2**self.attempt)) * (0.5 + random.random())
        self.attempt += 1
        elapsed = time.monotonic() - self.start
        if self.attempt >= RETRY_ATTEMPTS or elapsed + delay > RETRY_DEADLINE:
            endpoint_url = endpoint() or "storage.googleapis.com"
            raise StoreUnreachableError(
                f"{self.what}: no answer from {endpoint_url} after {self.attempt} attempt(s) in {elapsed:.0f}s "
                f"({type(exc).__name__}: {exc or 'timed out'})"
            ) from exc
        await asyncio.sleep(delay)


def _describe(method: str, path: str, args: tuple[Any, ...]) -> str:
    """``GET gs://bucket/key`` for a request gcsfs makes with a path template and its arguments."""
    if path.startswith("http"):
        return f"{method} {path}"
    names = [str(a) for a in args]
    if path.startswith("b/{}/o/{}") and len(names) >= 2:
        return f"{method} gs://{names[0]}/{names[1]}"
    if path.startswith("b/{}/o") and names:
        return f"{method} (listing) gs://{names[0]}/"
    return f"{method} {path.format(*names) if path.count('{}') == len(names) else path}"


class PreconditionFailed(FileExistsError):
    """An ``ifGenerationMatch`` precondition failed: the object is not at the generation we expected."""


class RequestCounter:
    """How many HTTP requests (attempts, retries included) one filesystem sent."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def add(self) -> None:
        with self._lock:
            self.count += 1

    def reset(self) -> int:
        with self._lock:
            n, self.count = self.count, 0
        return n


def is_transient(exc: BaseException) -> bool:
    """A failure worth retrying: 408/429/5xx, a reset or refused connection, a timeout. Never 404 or 412."""
    if isinstance(exc, FileNotFoundError | FileExistsError | PermissionError | StoreUnreachableError):
        return False  # (an operation that used up its retries: retrying it again would multiply the bound)
    if isinstance(exc, TimeoutError | ConnectionError | asyncio.TimeoutError):
        return True
    return bool(gcsfs.retry.is_retriable(exc))


class RetryingGCSFileSystem(GCSFileSystem):
    """gcsfs with our retry policy; ``requests`` counts attempts; ``match_glob``: listings send ``matchGlob``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.requests = RequestCounter()
        self.match_glob = kwargs.get("endpoint_url") is None

    async def _request(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        attempts = _Attempts(_describe(method, path, args))
        while True:
            try:
                return await self._request_once(method, path, *args, **kwargs)
            except Exception as exc:
                await attempts.failed(exc)

    async def _request_once(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
        self.requests.add()
        return await _RAW_REQUEST(self, method, path, *args, **kwargs)


def endpoint() -> str | None:
    host = os.environ.get("STORAGE_EMULATOR_HOST", "")
    if host in ("", "default"):
        return None
    return host if host.startswith(("http://", "https://")) else "http://" + host


_instances: dict[tuple[str | None, int], RetryingGCSFileSystem] = {}
"""Genuinely process-wide: a filesystem is a connection pool and an event-loop thread, shared by every thread
and build of the process (fsspec's own instance cache would make one per thread)."""


def filesystem() -> RetryingGCSFileSystem:
    url = endpoint()
    key = (url, os.getpid())
    fs = _instances.get(key)
    if fs is None:
        fs = _instances[key] = _new_filesystem(url)
    return fs


def _new_filesystem(url: str | None) -> RetryingGCSFileSystem:
    import aiohttp

    return RetryingGCSFileSystem(
        endpoint_url=url,
        token="anon" if url else None,
        requests_timeout=aiohttp.ClientTimeout(total=None, sock_connect=REQUEST_TIMEOUT, sock_read=REQUEST_TIMEOUT),
        use_listings_cache=False,  # other runners change the store: never answer from a stale listing
    )


def split(path: str) -> tuple[str, str]:
    """``gs://bucket/a/b`` -> (``bucket``, ``a/b``)."""
    rest = path.split("://", 1)[1] if "://" in path else path
    bucket, _, key = rest.partition("/")
    return bucket, key.rstrip("/")


def run(coro_fn: Callable[..., Coroutine[Any, Any, T]], *args: Any, fs: Any = None, **kwargs: Any) -> T:
    return sync((fs or filesystem()).loop, coro_fn, *args, **kwargs)


async def gather_limited(coros: list[Awaitable[T]], limit: int = 64) -> list[T]:
    semaphore = asyncio.Semaphore(limit)

    async def one(c: Awaitable[T]) -> T:
        async with semaphore:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))


# -- objects with generations ------------------------------------------------------------------


async def _read_with_generation(fs: RetryingGCSFileSystem, path: str) -> tuple[bytes, int] | None:
    bucket, key = split(path)
    try:
        headers, data = await fs._call("GET", "b/{}/o/{}", bucket, key, alt="media")
    except FileNotFoundError:
        return None
    return data, int(headers["X-Goog-Generation"])  # (aiohttp's headers: any case)


def read_with_generation(path: str) -> tuple[bytes, int] | None:
    """The object's content and generation in one request; None if it does not exist."""
    return run(_read_with_generation, filesystem(), path)


async def _last_written(fs: RetryingGCSFileSystem, path: str, generation: int) -> float | None:
    bucket, key = split(path)
    try:
        meta = await fs._call("GET", "b/{}/o/{}", bucket, key, json_out=True, fields="generation,updated")
    except FileNotFoundError:
        return None
    if int(meta.get("generation", -1)) != generation or "updated" not in meta:
        return None
    from datetime import datetime

    return datetime.fromisoformat(meta["updated"].replace("Z", "+00:00")).timestamp()


def last_written(path: str, generation: int) -> float | None:
    """When the object was last written (epoch seconds, the store's clock) if still at ``generation``; else None."""
    return run(_last_written, filesystem(), path, generation)


def _multipart_body(key: str, data: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = "marinbuild-boundary-7f3a9c"
    meta = json.dumps({"name": key})
    head = f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{meta}\r\n"
    head += f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n"
    body = head.encode() + data + f"\r\n--{boundary}--".encode()
    return body, {"Content-Type": f'multipart/related; boundary="{boundary}"'}


async def _write_if_generation(fs: RetryingGCSFileSystem, path: str, data: bytes, generation: int) -> int:
    bucket, key = split(path)
    body, headers = _multipart_body(key, data)
    url = f"{fs._location}/upload/storage/v1/b/{bucket}/o"
    ambiguous = False
    attempts = _Attempts(f"conditional write of {path}")
    while True:
        try:
            _, _, _, content = await fs._request_once(
                "POST", url, uploadType="multipart", ifGenerationMatch=str(generation), headers=headers, data=body
            )
            return int(json.loads(content)["generation"])
        except FileExistsError:
            if ambiguous:
                current = await _read_with_generation(fs, path)
                if current is not None and current[0] == data:
                    return current[1]  # an earlier attempt landed; its response was lost
            raise PreconditionFailed(f"{path}: not at generation {generation}") from None
        except Exception as exc:
            await attempts.failed(exc)
            ambiguous = True


def write_if_generation(path: str, data: bytes, generation: int) -> int:
    """Write ``data`` if the object is at ``generation`` (0: absent); the new generation, else ``PreconditionFailed``.
    The content is unique to this writer, so a retry failing against our own first attempt succeeds."""
    return run(_write_if_generation, filesystem(), path, data, generation)


async def _delete_if_generation(fs: RetryingGCSFileSystem, path: str, generation: int) -> bool:
    bucket, key = split(path)
    ambiguous = False
    attempts = _Attempts(f"conditional delete of {path}")
    while True:
        try:
            await fs._request_once("DELETE", "b/{}/o/{}", bucket, key, ifGenerationMatch=str(generation))
            return True
        except FileNotFoundError:
            return ambiguous  # gone: deleted by our earlier attempt, or by someone else
        except FileExistsError:
            return False
        except Exception as exc:
            await attempts.failed(exc)
            ambiguous = True


def delete_if_generation(path: str, generation: int) -> bool:
    """Delete the object if still at ``generation``; True if we did (fake-gcs-server ignores it: re-read first)."""
    return run(_delete_if_generation, filesystem(), path, generation)


# -- listings -----------------------------------------------------------------------------------

LIST_FIELDS = "items(name,size,md5Hash),nextPageToken"


class Listed(msgspec.Struct):
    """One object of a listing, as much of it as marinbuild reads."""

    name: str
    size: int = 0
    md5Hash: str = ""  # noqa: N815 (GCS's field name)


class _Page(msgspec.Struct):
    items: list[Listed] = []
    nextPageToken: str | None = None  # noqa: N815


_decode_page = msgspec.json.Decoder(_Page, strict=False).decode  # strict=False: the JSON API sends size as a string


async def list_pages(
    fs: RetryingGCSFileSystem,
    bucket: str,
    prefix: str,
    *,
    start: str | None = None,
    end: str | None = None,
    glob: tuple[str, Callable[[str], bool]] | None = None,
    page_size: int = 1000,
) -> AsyncIterator[list[Listed]]:
    """The objects under ``prefix`` (in ``[start, end)``), a page at a time; complete or raises. ``glob``: a
    ``matchGlob`` pattern, sent where ``fs.match_glob``, and its predicate: callers filter either way."""
    token: str | None = None
    pages = 0
    while True:
        match = glob[0] if glob is not None and fs.match_glob else None
        sent = {"startOffset": start, "endOffset": end, "matchGlob": match, "pageToken": token}
        params: dict[str, Any] = {"prefix": prefix, "maxResults": page_size, "fields": LIST_FIELDS}
        params.update((k, v) for k, v in sent.items() if v)
        try:
            _, _, _, content = await fs._request("GET", "b/{}/o", bucket, **params)
        except (ValueError, gcsfs.retry.HttpError) as exc:
            if "matchGlob" not in params or getattr(exc, "code", 400) != 400:
                raise
            fs.match_glob = False  # a server that rejects matchGlob: filter here instead
            continue
        except StoreUnreachableError:
            raise  # names the listing already
        except Exception as exc:
            raise _named(exc, _listing(bucket, prefix, start, pages)) from exc
        try:
            page = _decode_page(content)
        except msgspec.DecodeError as exc:  # not a listing (a proxy's error page...)
            raise _named(exc, _listing(bucket, prefix, start, pages)) from exc
        pages += 1
        if glob is not None and "matchGlob" in params and any(not glob[1](i.name) for i in page.items):
            fs.match_glob = False  # it ignored the glob: don't send what it won't apply
        yield page.items
        token = page.nextPageToken
        if not token:
            return


def _listing(bucket: str, prefix: str, start: str | None, pages: int) -> str:
    return f"listing gs://{bucket}/{prefix} from {start or 'its start'}, page {pages + 1}"


def _named(exc: Exception, what: str) -> Exception:
    """``exc`` with ``what`` in front of its message, of the same type when that type is made from a message
    (``PermissionError``, ``FileNotFoundError``...): callers that tell errors apart by type still can."""
    try:
        return type(exc)(f"{what}: {exc}")
    except Exception:
        return exc


async def list_objects(fs: RetryingGCSFileSystem, bucket: str, prefix: str) -> list[Listed]:
    return [obj async for page in list_pages(fs, bucket, prefix) for obj in page]
