"""A loopback HTTP proxy in front of a GCS emulator: adds latency, injects faults, counts requests.

Run as a process (``python loopback.py UPSTREAM_URL [--latency S] [--fail-rate P]``); it prints
its port on the first line of stdout. Control and stats over HTTP on the same port:
``GET /__proxy/stats`` -> ``{"requests": n, "failed": n, "bytes_out": n}``; ``POST /__proxy/config`` with JSON
``{"latency": s, "fail_rate": p, "faults": [kinds], "fail_next": n, "seed": n, "hang": bool, "forbid": text}``
(``fail_next`` fails exactly the next n requests, cycling through ``faults``; ``hang`` makes it read every request
and never answer, as a server that stopped answering does; ``forbid`` answers 403 to every request whose target
contains ``text``, as a bucket policy that denies one object does, until set to ``""``); ``POST /__proxy/reset``
zeroes the counters.

``--preconditions`` (or ``"preconditions": true``) enforces the generation preconditions the fake-gcs-server this
repository installs ignores: ``ifGenerationMatch`` on simple uploads (``uploadType=media``; it honours it on multipart
uploads only; fixed upstream in fsouza/fake-gcs-server#2308), and ``ifGenerationNotMatch``/``ifGenerationMatch`` on
reads. tensorstore's OCDBT checkpoints (levanter's) rely on both when several processes write one checkpoint: without
the first, two hosts both create ``manifest.ocdbt`` and one fails with "Configuration mismatch" or loses arrays;
without the second, a host that lost a race re-reads the manifest for good (it asks for a manifest newer than the one
it has, and the emulator answers 200 with that same one instead of 304), and its checkpoint never commits. Simple
uploads are then serialised per object, and one whose ``ifGenerationMatch`` is not the object's generation (0:
absent) is answered 412; a read of an object at its ``ifGenerationNotMatch`` is answered 304 Not Modified, one not at
its ``ifGenerationMatch`` 412, as GCS answers them.

Two settings make a read look as GCS answers it, for benches (``POST /__proxy/config``, or ``--replay`` and
``--fields``): ``fields`` applies a request's ``fields`` parameter (GCS's partial responses, e.g.
``items(name,size),nextPageToken``) to its JSON answer, which fake-gcs-server ignores, sending every object's whole
metadata; ``replay`` answers a GET it has already forwarded, since the last request that was not a GET, with the
same answer from memory, without the upstream: the bucket has not changed, and the upstream's CPU (real GCS's runs
on its own machines) stays out of what a bench on one machine measures. ``forwarded`` in the stats counts the
requests that reached an upstream.

``--routes FILE`` (JSON ``{"name/prefix/": "http://upstream", ...}``) spreads one bucket over several servers: a
request goes to the upstream of the longest route that is a folder prefix of the object it names (an object's
name, or a listing's ``prefix``); a request no route covers is answered 501, so a listing spanning servers fails
instead of returning part of the bucket. It lets a bench hold more objects than one emulator loads in reasonable
time (fake-gcs-server stores a bucket's objects in one list and scans it on every insert).

A failed request is one of: a 503 answered without forwarding; the connection reset without
forwarding; the request forwarded and applied, then the connection reset (the client never
learns it succeeded); the request forwarded and applied, then a 503. The last two are the
ambiguous failures a retry must cope with.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import re
import socket
import struct
import sys
import urllib.parse

import aiohttp

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "content-length",
    "host",
    "proxy-connection",
    "upgrade",
    "te",
    "trailer",
}
FAULTS = ("503", "reset", "reset-after", "503-after")
_OBJECT_PATH = re.compile(r"^(?:/download|/upload)?/storage/v1/b/[^/]+/o(?:/([^?]*))?$")
"""An object request's path: a listing (no name), or one object (its quoted name)."""


class Proxy:
    def __init__(
        self, upstream: str, latency: float, fail_rate: float, seed: int | None, routes: dict[str, str] | None = None
    ):
        self.upstream = upstream.rstrip("/")
        self.routes = {k: v.rstrip("/") for k, v in (routes or {}).items()}
        self.latency = latency
        self.fail_rate = fail_rate
        self.rng = random.Random(seed)
        self.faults: list[str] = list(FAULTS)
        self.fail_next = 0
        self.hang = False
        self.forbid = ""
        self.replay = False
        self.fields = False
        self.preconditions = False
        self._locks: dict[str, asyncio.Lock] = {}  # per object, for ``preconditions``
        self._answers: dict[str, tuple[int, str, list[tuple[str, str]], bytes]] = {}
        """``replay``'s memory: each GET target's answer since the last request that was not a GET."""
        self.requests = 0
        self.forwarded = 0
        self.failed = 0
        self.bytes_out = 0
        self.session: aiohttp.ClientSession | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader, writer)
                if request is None:
                    break
                method, target, headers, body = request
                if target.startswith("/__proxy/"):
                    await self._control(writer, method, target, body)
                    continue
                if not await self._forward(writer, method, target, headers, body):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if not writer.transport.is_closing():
                writer.close()

    async def _control(self, writer: asyncio.StreamWriter, method: str, target: str, body: bytes) -> None:
        if target.startswith("/__proxy/config") and method == "POST":
            config = json.loads(body or b"{}")
            self.latency = float(config.get("latency", self.latency))
            self.fail_rate = float(config.get("fail_rate", self.fail_rate))
            if "seed" in config:
                self.rng = random.Random(config["seed"])
            if "faults" in config:
                self.faults = [f for f in config["faults"] if f in FAULTS] or list(FAULTS)
            self.fail_next = int(config.get("fail_next", self.fail_next))
            self.hang = bool(config.get("hang", self.hang))
            self.forbid = str(config.get("forbid", self.forbid))
            self.fields = bool(config.get("fields", self.fields))
            self.replay = bool(config.get("replay", self.replay))
            self.preconditions = bool(config.get("preconditions", self.preconditions))
            if not self.replay:
                self._answers.clear()
        elif target.startswith("/__proxy/reset"):
            self.requests = self.forwarded = self.failed = self.bytes_out = 0
        payload = json.dumps(
            {
                "requests": self.requests,
                "forwarded": self.forwarded,
                "failed": self.failed,
                "bytes_out": self.bytes_out,
                "latency": self.latency,
                "fail_rate": self.fail_rate,
            }
        ).encode()
        await _write_response(writer, 200, "OK", [("Content-Type", "application/json")], payload)

    async def _forward(
        self, writer: asyncio.StreamWriter, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> bool:
        """Serve one request; False if the connection was reset."""
        self.requests += 1
        while self.hang:  # never answer (until told to stop hanging)
            await asyncio.sleep(0.05)
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.forbid and self.forbid in target:
            self.failed += 1
            await _write_error(writer, 403, "Forbidden", "injected: access denied")
            return True
        if self.fail_next > 0:
            self.fail_next -= 1
            fault: str | None = self.faults[self.fail_next % len(self.faults)]
        else:
            fault = self.rng.choice(self.faults) if self.rng.random() < self.fail_rate else None
        if fault is not None:
            self.failed += 1
        if fault == "503":
            await _write_error(writer, 503, "Service Unavailable", "injected backend error")
            return True
        if fault == "reset":
            _reset(writer)
            return False
        assert self.session is not None
        answer = self._answers.get(target) if method == "GET" else None
        if answer is None:
            answer = await self._checked(method, target, headers, body)
            if answer is None:
                self.failed += 1
                await _write_error(writer, 501, "Not Implemented", f"no route covers {target}")
                return True
        status, reason, out_headers, content = answer
        if fault == "reset-after":
            _reset(writer)
            return False
        if fault == "503-after":
            await _write_error(writer, 503, "Service Unavailable", "injected backend error")
            return True
        self.bytes_out += len(content)
        await _write_response(writer, status, reason, out_headers, content)
        return True

    async def _checked(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
        """``_ask_upstream``, with a simple upload's ``ifGenerationMatch`` and a read's generation conditions enforced
        when ``preconditions`` is set."""
        path, _, query = target.partition("?")
        params = dict(urllib.parse.parse_qsl(query))
        conditional_read = "ifGenerationNotMatch" in params or "ifGenerationMatch" in params
        if self.preconditions and method == "GET" and conditional_read:
            return _conditional_read(await self._ask_upstream(method, target, headers, body), params)
        if not (self.preconditions and method == "POST" and params.get("uploadType") == "media" and "name" in params):
            return await self._ask_upstream(method, target, headers, body)
        bucket = path.split("/")[5]
        key = f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(params['name'], safe='')}"
        async with self._locks.setdefault(key, asyncio.Lock()):
            if "ifGenerationMatch" in params:
                found = await self._ask_upstream("GET", key, [], b"")
                generation = int(json.loads(found[3])["generation"]) if found and found[0] == 200 else 0
                if generation != int(params["ifGenerationMatch"]):
                    return _precondition_failed()
            return await self._ask_upstream(method, target, headers, body)

    async def _ask_upstream(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
        """The upstream's answer (with ``fields`` applied when set), kept for ``replay``; None if no route covers
        ``target``."""
        assert self.session is not None
        upstream = self._upstream_for(target)
        if upstream is None:
            return None
        if method != "GET":
            self._answers.clear()  # the bucket may change: no earlier answer holds
        self.forwarded += 1
        forward_headers = [(k, v) for k, v in headers if k.lower() not in HOP_BY_HOP]
        async with self.session.request(
            method, upstream + target, headers=forward_headers, data=body, allow_redirects=False
        ) as response:
            content = await response.read()
            out_headers = [(k, v) for k, v in response.headers.items() if k.lower() not in HOP_BY_HOP]
            status, reason = response.status, response.reason or ""
        if self.fields and method == "GET" and status == 200:
            query = urllib.parse.parse_qs(target.partition("?")[2])
            selector = query.get("fields")
            if selector and query.get("alt") != ["media"]:  # metadata, not an object's content
                content, out_headers = _partial_response(content, out_headers, selector[0])
        answer = (status, reason, out_headers, content)
        if self.replay and method == "GET" and status == 200:
            self._answers[target] = answer
        return answer

    def _upstream_for(self, target: str) -> str | None:
        """The server holding what ``target`` names (see the module docstring); None if no route covers it."""
        if not self.routes:
            return self.upstream
        path, _, query = target.partition("?")
        match = _OBJECT_PATH.match(path)
        if match is None:
            return None
        params = urllib.parse.parse_qs(query)
        name = urllib.parse.unquote(match.group(1) or "") or (params.get("prefix") or params.get("name") or [""])[0]
        folder = name if name.endswith("/") else name.rpartition("/")[0] + "/"
        while folder != "/":
            if folder in self.routes:
                return self.routes[folder]
            folder = folder[:-1].rpartition("/")[0] + "/"
        return None


def _conditional_read(
    answer: tuple[int, str, list[tuple[str, str]], bytes] | None, params: dict[str, str]
) -> tuple[int, str, list[tuple[str, str]], bytes] | None:
    """A read's answer under its ``ifGenerationNotMatch`` (304 Not Modified when the object is at that generation)
    and ``ifGenerationMatch`` (412 when it is not), as GCS answers it; the emulator ignores both on reads."""
    if answer is None or answer[0] not in (200, 206):
        return answer
    headers = answer[2]
    generation = {k.lower(): v for k, v in headers}.get("x-goog-generation")
    if generation is None:  # metadata, not media: the generation is in the JSON body
        try:
            generation = str(json.loads(answer[3])["generation"])
        except (ValueError, KeyError, TypeError):  # compressed, or not an object's metadata
            return answer
    if params.get("ifGenerationNotMatch") == generation:
        return 304, "Not Modified", [(k, v) for k, v in headers if k.lower().startswith(("x-goog-", "etag"))], b""
    if params.get("ifGenerationMatch", generation) != generation:
        return _precondition_failed()
    return answer


def _precondition_failed() -> tuple[int, str, list[tuple[str, str]], bytes]:
    error = {"error": {"code": 412, "message": "Precondition Failed", "errors": [{"reason": "conditionNotMet"}]}}
    return 412, "Precondition Failed", [("Content-Type", "application/json")], json.dumps(error).encode()


def _partial_response(
    content: bytes, headers: list[tuple[str, str]], selector: str
) -> tuple[bytes, list[tuple[str, str]]]:
    """A JSON answer cut to GCS's ``fields`` selector, uncompressed (the answer and its headers)."""
    encoding = {k.lower(): v for k, v in headers}.get("content-encoding", "").lower()
    if encoding == "gzip":
        content = gzip.decompress(content)
    elif encoding not in ("", "identity"):
        return content, headers
    try:
        value = json.loads(content)
    except ValueError:
        return content, headers
    kept = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
    return json.dumps(_select(value, _parse_fields(selector)), separators=(",", ":")).encode(), kept


def _parse_fields(selector: str) -> dict[str, dict | None]:
    """GCS's ``fields`` syntax (``a,b/c,d(e,f)``) as a tree: each name to what of it to keep (None: all of it)."""
    at = 0

    def selection() -> dict[str, dict | None]:
        nonlocal at
        tree: dict[str, dict | None] = {}
        while at < len(selector) and selector[at] != ")":
            end = at
            while end < len(selector) and selector[end] not in ",()":
                end += 1
            path, at = selector[at:end].strip().split("/"), end
            sub: dict[str, dict | None] | None = None
            if at < len(selector) and selector[at] == "(":
                at += 1
                sub = selection()
                at += 1  # the ")"
            for name in reversed(path[1:]):
                sub = {name: sub}
            tree[path[0]] = sub
            if at < len(selector) and selector[at] == ",":
                at += 1
        return tree

    return selection()


def _select(value: object, tree: dict[str, dict | None] | None) -> object:
    if tree is None or "*" in tree:
        return value
    if isinstance(value, list):
        return [_select(item, tree) for item in value]
    if isinstance(value, dict):
        return {name: _select(value[name], sub) for name, sub in tree.items() if name in value}
    return value


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with RST
    writer.transport.abort()


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[str, str, list[tuple[str, str]], bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = []
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers.append((name.strip(), value.strip()))
    lowered = {k.lower(): v for k, v in headers}
    if lowered.get("expect", "").lower() == "100-continue":  # curl (tensorstore's) waits for it before the body
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        headers = [(k, v) for k, v in headers if k.lower() != "expect"]
    if lowered.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readline()).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readline()
                break
            chunks.append(await reader.readexactly(size))
            await reader.readline()
        body = b"".join(chunks)
    else:
        body = await reader.readexactly(int(lowered.get("content-length", "0")))
    return method, target, headers, body


async def _write_response(
    writer: asyncio.StreamWriter, status: int, reason: str, headers: list[tuple[str, str]], body: bytes
) -> None:
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers] + [f"Content-Length: {len(body)}"]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
    await writer.drain()


async def _write_error(writer: asyncio.StreamWriter, status: int, reason: str, message: str) -> None:
    """An error answered as GCS answers one: a JSON ``{"error": {"code", "message"}}`` body."""
    body = json.dumps({"error": {"code": status, "message": message}}).encode()
    await _write_response(writer, status, reason, [("Content-Type", "application/json")], body)


async def serve(
    upstream: str,
    port: int,
    latency: float,
    fail_rate: float,
    seed: int | None,
    routes: dict[str, str] | None = None,
    settings: dict[str, bool] | None = None,
) -> None:
    proxy = Proxy(upstream, latency, fail_rate, seed, routes)
    proxy.fields = bool((settings or {}).get("fields"))
    proxy.replay = bool((settings or {}).get("replay"))
    proxy.preconditions = bool((settings or {}).get("preconditions"))
    proxy.session = aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(limit=256))
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", port, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("upstream")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--routes", help="JSON file: folder prefix -> upstream URL (see the module docstring)")
    parser.add_argument("--fields", action="store_true", help="apply a read's `fields` to its answer, as GCS does")
    parser.add_argument("--replay", action="store_true", help="answer a repeated read from memory (see above)")
    parser.add_argument("--preconditions", action="store_true", help="enforce ifGenerationMatch on simple uploads")
    args = parser.parse_args()
    routes = None
    if args.routes:
        with open(args.routes) as f:
            routes = json.load(f)
    settings = {"fields": args.fields, "replay": args.replay, "preconditions": args.preconditions}
    try:
        asyncio.run(serve(args.upstream, args.port, args.latency, args.fail_rate, args.seed, routes, settings))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
