"""Stored takes: ``GET /v1/audio/{key}`` (content-addressed, cacheable forever), list, delete.

A key names immutable content: ``immutable`` with the key as strong ETag. Every byte sent is
cut from the verified entry in memory (whole or Range), never re-read from the file
(``service.ranges``). Another tenant's key is a 404 exactly like a missing one, at the same
cost (``Cache.get_owned``). A zero-copy front (nginx on the folder) skips the verification and
the tenant check: outside these promises. docs/operating/service.md.
"""

from __future__ import annotations

import re
import time
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from ..entry import Entry
from ..errors import NotFound
from ..vocabulary import Outcome
from .guard import scope_tenant, tenant_from, tenant_of
from .plain_routes import PlainEndpoint, mount_first, refusing
from .ranges import RangeNotSatisfiable, byte_range
from .respond import send_parts
from .serving import Server

router = APIRouter()
KEY = re.compile(r"[0-9a-f]{64}")
IMMUTABLE = "private, max-age=31536000, immutable"
ENVELOPE_HEADER = ("X-Voxcache-Envelope", "vxch")
"""Says the body is the stored file: a WAV with voxcache's ``vxch`` chunk between ``fmt ``
and ``data`` (players skip it; a client that takes bytes 44.. as samples must not)."""


class StoredAudio(PlainEndpoint):
    """The ASGI endpoint of ``GET``/``HEAD /v1/audio/{key}`` (a plain Starlette route: no
    dependency injection on the hottest request). A plain GET of a take this tenant owns
    in the memory tier is one send of the verified bytes; everything else (a disk read, a
    Range or conditional request, HEAD, a refusal) builds its response in ``_full``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts = self.parts(scope["app"])
        server = parts.server
        if scope["method"] == "GET":
            key = scope["path_params"]["key"]
            tenant = scope_tenant(parts.options.api_keys, scope)
            names = {name for name, _ in scope["headers"]}
            entry = None if CONDITIONAL & names or not KEY.fullmatch(key) else \
                server.cache.in_process.peek(key)  # no recency change until ownership is known
            if entry is not None and entry.header.meta.get("tenant", "default") == tenant:
                server.cache.in_process.touch(key)
                await send_parts(send, 200, _raw_headers(key, len(entry.blob)), (entry.blob,))
                return
        await refusing(parts.handlers, self._full, scope, receive, send)

    async def _full(self, scope: Scope, receive: Receive, send: Send) -> None:
        key = scope["path_params"]["key"]
        tenant = tenant_from(scope["app"].state.options, Headers(scope=scope))
        if not KEY.fullmatch(key):
            raise NotFound(f"no entry {key!r}")
        response = await stored_audio(key, Request(scope, receive), tenant)
        await response(scope, receive, send)


CONDITIONAL = frozenset((b"range", b"if-none-match"))
"""Request headers that need the full response (a slice, a 304)."""
_TYPE, _CONTROL, _RANGES = ((b"content-type", b"audio/wav"), (b"cache-control", IMMUTABLE.encode()),
                            (b"accept-ranges", b"bytes"))
_HIT, _TIER, _ENVELOPE = ((b"x-cache", Outcome.HIT.header.encode()), (b"x-cache-tier", b"memory"),
                          (ENVELOPE_HEADER[0].lower().encode(), ENVELOPE_HEADER[1].encode()))


def _raw_headers(key: str, length: int) -> list[tuple[bytes, bytes]]:
    """A whole memory hit's headers: ``stored_audio``'s, as raw ASGI pairs."""
    raw = key.encode()
    return [_TYPE, (b"content-length", b"%d" % length), (b"etag", b'"%s"' % raw), _CONTROL,
            _RANGES, _HIT, _TIER, (b"x-cache-key", raw), _ENVELOPE]


async def stored_audio(key: str, request: Request, tenant: str) -> Response:
    """Serve a stored entry: the WAV file itself, envelope chunk included
    (``X-Voxcache-Envelope: vxch``; synthesis routes deliver plain WAVs)."""
    server: Server = request.app.state.server
    found = await server.stored(key, tenant)
    if found is None:
        raise NotFound(f"no entry {key!r}")
    entry, tier = found
    headers = {"ETag": f'"{key}"', "Cache-Control": IMMUTABLE, "X-Cache": Outcome.HIT.header,
               "X-Cache-Key": key, "X-Cache-Tier": tier, "Accept-Ranges": "bytes",
               ENVELOPE_HEADER[0]: ENVELOPE_HEADER[1]}
    if _matches(request.headers.get("if-none-match"), key):
        return Response(status_code=304, headers=headers)
    return _body(entry, request, headers)


def install(app: FastAPI) -> None:
    """Mount ``/v1/audio/{key}`` first on the app's router, documented as FastAPI would."""
    mount_first(app, "/v1/audio/{key}", StoredAudio(), "GET", "stored_audio", {
        "tags": ["entries"], "summary": "Stored Audio", "operationId": "stored_audio",
        "description": "Serve a stored entry: the WAV file itself, envelope chunk included "
                       "(``X-Voxcache-Envelope: vxch``; synthesis routes deliver plain WAVs).",
        "parameters": [{"name": "key", "in": "path", "required": True,
                        "schema": {"type": "string", "title": "Key"}}],
        "responses": {"200": {"description": "the stored WAV", "content": {"audio/wav": {}}},
                      "206": {"description": "a byte range"},
                      "304": {"description": "not modified"},
                      "404": {"description": "no such entry (or another tenant's)"}}})


def _body(entry: Entry, request: Request, headers: dict[str, str]) -> Response:
    """The whole verified blob, or the one range asked for, cut from it."""
    blob, size = entry.blob, len(entry.blob)
    try:
        span = byte_range(request.headers.get("range"), size,
                          request.headers.get("if-range"), entry.header.key)
    except RangeNotSatisfiable:
        return Response(status_code=416, headers={**headers, "Content-Range": f"bytes */{size}"})
    if span is None:
        # One send of bytes already in memory beats FileResponse's chunked thread reads
        # (measured on 2 cores, 690 KB: ~1,400 vs ~320 requests/s).
        return Response(blob, media_type="audio/wav", headers=headers)
    first, last = span
    return Response(blob[first:last + 1], status_code=206, media_type="audio/wav",
                    headers={**headers, "Content-Range": f"bytes {first}-{last}/{size}"})


def _matches(if_none_match: str | None, key: str) -> bool:
    if not if_none_match:
        return False
    tags = {t.strip().removeprefix("W/").strip('"') for t in if_none_match.split(",")}
    return key in tags or "*" in tags


@router.get("/v1/entries", tags=["entries"])
async def list_entries(request: Request, limit: int = Query(50, ge=1, le=1000),
                       tenant: str = Depends(tenant_of)) -> dict[str, Any]:
    """This tenant's stored takes, most recently used first (from the index)."""
    server: Server = request.app.state.server
    rows = await server.admission.read(
        server.cache.index.rows, "tenant = ? AND kind = 'audio'", [tenant],
        "last_access DESC", limit)
    return {"entries": [{"key": r.key, "size": r.size, "created": r.created, "hits": r.hits,
                         "pinned": r.pinned, "voice": r.voice, "text": r.text,
                         "url": f"/v1/audio/{r.key}"} for r in rows]}


@router.delete("/v1/entries/{key}", status_code=204, tags=["entries"])
async def delete_entry(key: str, request: Request, tenant: str = Depends(tenant_of)) -> Response:
    """Delete one of this tenant's takes from every tier."""
    server: Server = await _owned(request, key, tenant)
    await server.admission.read(server.cache.delete, key)
    return Response(status_code=204)


@router.put("/v1/entries/{key}/pin", status_code=204, tags=["entries"])
async def pin_entry(key: str, request: Request, tenant: str = Depends(tenant_of),
                    ttl: float | None = Query(None, gt=0, allow_inf_nan=False,
                                              description="pinned this long only")
                    ) -> Response:
    """Pin one of this tenant's takes: never evicted (for ``ttl`` seconds, when given)."""
    server = await _owned(request, key, tenant)
    until = None if ttl is None else time.time() + ttl
    await server.admission.read(server.cache.pin, key, True, until)
    return Response(status_code=204)


@router.delete("/v1/entries/{key}/pin", status_code=204, tags=["entries"])
async def unpin_entry(key: str, request: Request, tenant: str = Depends(tenant_of)) -> Response:
    """Let one of this tenant's takes be evicted again."""
    server = await _owned(request, key, tenant)
    await server.admission.read(server.cache.pin, key, False)
    return Response(status_code=204)


async def _owned(request: Request, key: str, tenant: str) -> Server:
    """The server, once ``key`` is known to be one of ``tenant``'s stored takes (else 404)."""
    server: Server = request.app.state.server
    owner = await server.admission.read(server.cache.folder.owner, key) \
        if KEY.fullmatch(key) else None
    if owner != tenant:
        raise NotFound(f"no entry {key!r}")
    return server
