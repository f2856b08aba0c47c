"""Stored takes: ``GET /v1/audio/{key}`` (content-addressed, cacheable forever), list, delete.

A key names immutable content, so the response is ``immutable`` with the key as
its strong ETag. Every byte sent comes from a verified entry: the file is
verified (every byte of it) when this process reads it, the verified entry sits
in the memory tier, and whole bodies and Range slices are both cut from it —
never re-read from the file, which could have changed since (``service.ranges``).
A zero-copy front (nginx serving the cache folder, ``docs/operating/nginx.conf``) skips
that verification and the tenant check; it is outside these promises.

Another tenant's key is answered exactly like a key that does not exist (404),
at the same cost (``Cache.get_owned``): its file is never read and the probe
counts nothing for its owner.
"""

from __future__ import annotations

import re
import time
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from ..entry import Entry
from ..errors import NotFound
from .guard import tenant_of
from .ranges import RangeNotSatisfiable, byte_range
from .serving import Server

router = APIRouter()
KEY = re.compile(r"[0-9a-f]{64}")
IMMUTABLE = "private, max-age=31536000, immutable"
ENVELOPE_HEADER = ("X-Voxcache-Envelope", "vxch")
"""Says the body is the stored file: a WAV with voxcache's ``vxch`` chunk between ``fmt ``
and ``data`` (players skip it; a client that takes bytes 44.. as samples must not)."""


@router.head("/v1/audio/{key}", include_in_schema=False)
@router.get("/v1/audio/{key}", tags=["entries"],
            responses={200: {"content": {"audio/wav": {}}}, 304: {}, 206: {},
                       404: {"description": "no such entry (or another tenant's)"}})
async def stored_audio(key: str, request: Request, tenant: str = Depends(tenant_of)) -> Response:
    """Serve a stored entry: the WAV file itself, envelope chunk included
    (``X-Voxcache-Envelope: vxch``; synthesis routes deliver plain WAVs)."""
    server: Server = request.app.state.server
    if not KEY.fullmatch(key):
        raise NotFound(f"no entry {key!r}")
    found = await server.stored(key, tenant)
    if found is None:
        raise NotFound(f"no entry {key!r}")
    entry, tier = found
    headers = {"ETag": f'"{key}"', "Cache-Control": IMMUTABLE, "X-Cache": "HIT",
               "X-Cache-Key": key, "X-Cache-Tier": tier, "Accept-Ranges": "bytes",
               ENVELOPE_HEADER[0]: ENVELOPE_HEADER[1]}
    if _matches(request.headers.get("if-none-match"), key):
        return Response(status_code=304, headers=headers)
    return _body(entry, request, headers)


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
