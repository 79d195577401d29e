"""The Starlette application: pages, JSON APIs, the file view and the live event stream. GET only: read-only.

Pages are one fixed HTML shell whose script fetches ``/api/...`` JSON and builds the DOM with ``textContent`` and
attributes only, so no user string is parsed as HTML. On loopback a request whose ``Host`` is not a loopback name is
refused (DNS rebinding); every response carries a strict Content-Security-Policy, ``nosniff`` and ``no-referrer``; the
file view answers ``text/plain`` only. Once the server is told to stop, every response ends at once (a stream ends, a
request still computing gets a 503): each answer is computed in a daemon thread of its own, not in Starlette's pool,
which the process would wait for on exit."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import html
import json
import threading
from collections.abc import Callable
from importlib.resources import files as package_files
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from marinbuild.serve import history, live
from marinbuild.serve.files import Refused, read_text
from marinbuild.serve.model import PrefixUnreadable, ViewModel
from marinbuild.serve.stopping import Stopping
from marinbuild.ui.event_log import events_dir

STATIC = package_files("marinbuild.serve") / "static"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
PAGES = ("graph", "step", "runs", "run", "experiment", "training")


def _shell(page: str) -> str:
    assert page in PAGES
    return (STATIC / "shell.html").read_text(encoding="utf-8").replace("{{page}}", page)


LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]


def create_app(model: ViewModel, loopback_only: bool = True, stopping: Stopping | None = None) -> Starlette:
    """The application over ``model``'s workspace and prefix (``loopback_only``, ``stopping``: module docstring)."""
    stopping = stopping or Stopping()

    def page(name: str) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                await _computed(model.check_prefix, stopping)
            except _Stopping:
                return _error(503, STOPPING)
            except PrefixUnreadable as exc:
                return HTMLResponse(_error_page(str(exc)), status_code=503, headers=HEADERS)
            return HTMLResponse(_shell(name), headers=HEADERS)

        return endpoint

    def api(compute: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                result = await _computed(lambda: compute(request), stopping)
            except _Stopping:
                return _error(503, STOPPING)
            except Refused as exc:
                return _error(exc.status, exc.message)
            except PrefixUnreadable as exc:
                return _error(503, str(exc))
            except Exception as exc:  # a BUILD file error, an unreachable bucket...: said, not a stack trace
                return _error(500, f"{type(exc).__name__}: {exc}")
            if result is None:
                return _error(404, f"nothing at {request.url.path}")
            return JSONResponse(result, headers=HEADERS)

        return endpoint

    async def file_view(request: Request) -> Response:
        try:
            text = await _computed(lambda: read_text(model.prefix, request.path_params["path"]), stopping)
        except _Stopping:
            return PlainTextResponse(f"503: {STOPPING}\n", status_code=503, headers=HEADERS)
        except Refused as exc:
            return PlainTextResponse(f"{exc.status}: {exc.message}\n", status_code=exc.status, headers=HEADERS)
        return PlainTextResponse(text, headers=HEADERS)

    async def events(request: Request) -> Response:
        async def stream() -> Any:
            yield ": connected\n\n"
            async for record in live.follow(events_dir(model.cache_dir), model.prefix, stopping=stopping):
                if await request.is_disconnected():
                    return
                yield ": keepalive\n\n" if record is None else f"data: {json.dumps(record, default=str)}\n\n"

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={**HEADERS, "Cache-Control": "no-store"}
        )

    routes = [
        Route("/", page("graph")),
        Route("/step/{path:path}", page("step")),
        Route("/runs", page("runs")),
        Route("/run/{id}", page("run")),
        Route("/experiment", page("experiment")),
        Route("/training", page("training")),
        Route("/file/{path:path}", file_view),
        Route("/api/graph", api(lambda r: model.graph())),
        Route("/api/step/{path:path}", api(lambda r: model.step(r.path_params["path"]))),
        Route("/api/runs", api(lambda r: model.runs())),
        Route("/api/run/{id}", api(lambda r: history.run(model.cache_dir, model.prefix, r.path_params["id"]))),
        Route("/api/experiment", api(lambda r: history.experiment(model.prefix, r.query_params.get("path", "")))),
        Route("/api/training", api(lambda r: model.training(r.query_params.getlist("path")))),
        Route("/api/events", events),
        Mount("/static", app=StaticFiles(directory=str(STATIC)), name="static"),
    ]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_NAMES)] if loopback_only else []
    return Starlette(routes=routes, middleware=middleware)


STOPPING = "the server is stopping"


class _Stopping(Exception):
    """The server was told to stop before a request's answer was computed."""


async def _computed(compute: Callable[[], Any], stopping: Stopping) -> Any:
    """``compute()`` in a daemon thread, awaited; ``_Stopping`` if the server stops first (the thread runs on)."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def run() -> None:
        try:
            result = compute()
        except BaseException as exc:
            with contextlib.suppress(concurrent.futures.InvalidStateError):  # abandoned: the server is stopping
                future.set_exception(exc)
        else:
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_result(result)

    threading.Thread(target=run, name="marinbuild-serve-request", daemon=True).start()
    done = asyncio.wrap_future(future)
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({done, stop}, return_when=asyncio.FIRST_COMPLETED)
        if done.done():
            return done.result()
        raise _Stopping
    finally:
        stop.cancel()
        done.cancel()  # nothing once settled; else (stopping, or the request cancelled) a late answer is dropped


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=HEADERS)


def _error_page(message: str) -> str:
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>marinbuild serve: error</title>"
        "<link rel='stylesheet' href='/static/app.css'></head><body><header><a href='/'>marinbuild</a></header>"
        f"<main><h1>Cannot show this workspace</h1><p class='error'>{html.escape(message)}</p></main></body></html>"
    )
