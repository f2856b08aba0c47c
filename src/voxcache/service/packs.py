"""Packs over HTTP, and what a node tells its edges: ``/v1/packs/...``.

``GET /v1/packs/identity`` (any key: the identity this node keys with, and the caller's
tenant), ``POST /v1/packs`` (admin: build a signed pack of a selection, optionally a delta
against ``base``; 201 with its descriptor) and ``GET /v1/packs/{digest}`` (admin: the
immutable file, ETag and Range). Publishing is on once ``[packs] signing_key`` names a key
(read at start). ``install`` also records the node's identity and an edge's fallback.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from .. import identity as identities
from ..errors import InvalidParameter, NotFound
from ..packs.select import Selection
from .errors import Unauthorized
from .guard import admin_only, presented_key, tenant_for
from .options import ServiceOptions

log = logging.getLogger("voxcache.service")
router = APIRouter(tags=["packs"])
PACK_MEDIA_TYPE = "application/x-tar"


@dataclass(frozen=True, slots=True)
class PackSettings:
    """The ``[packs]`` table (docs/operating/edge.md)."""

    signing_key: str | None = None
    """The private key (``voxcache pack keygen``) this node signs the packs it publishes
    with; none: ``/v1/packs`` publishes nothing. Read at start: a bad path stops the
    server there."""


async def any_key(request: Request) -> str | None:
    """FastAPI dependency: once keys are configured, a tenant's or an admin's key; returns
    the caller's tenant (None for an admin key)."""
    options: ServiceOptions = request.app.state.options
    if not options.keyed:
        return "default"
    tenant = tenant_for(options.api_keys, request.headers) if options.api_keys else None
    if tenant is not None:
        return tenant
    given = presented_key(request.headers) or ""
    if any(hmac.compare_digest(k.encode(), given.encode()) for k in options.admin_keys):
        return None
    raise Unauthorized("this route needs an API key (a tenant's or an [admin] one): send "
                       "'Authorization: Bearer <key>'")


@router.get("/v1/packs/identity")
async def pack_identity(request: Request, tenant: str | None = Depends(any_key)
                        ) -> dict[str, Any]:
    """The engine identity takes are keyed with here, and the caller's tenant."""
    return {"identity": node_identity(request.app), "tenant": tenant}


class PackRequest(BaseModel):
    """What to pack (every field narrows the selection; none packs everything)."""

    model_config = ConfigDict(extra="forbid")
    voices: list[Annotated[str, Field(min_length=1, max_length=200)]] = Field(
        default_factory=list, max_length=1000)
    tenant: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    revision: str | None = Field(None, max_length=1000)
    top: int | None = Field(None, ge=1)
    newer_than: float | None = Field(None, ge=0, allow_inf_nan=False,
                                     description="seconds: created at most this long ago")
    older_than: float | None = Field(None, ge=0, allow_inf_nan=False)
    base: str | None = Field(None, pattern=r"^[0-9a-f]{64}$",
                             description="a snapshot this caller holds whole: the pack is "
                                         "the delta against it")


@router.post("/v1/packs", status_code=201, dependencies=[Depends(admin_only)])
async def build_pack(body: PackRequest, request: Request) -> JSONResponse:
    """Build a signed pack of a selection (a delta when ``base`` names a snapshot the caller
    already holds); answer its descriptor, with the download in ``Location``."""
    publisher = _publisher(request)
    selection = Selection(tuple(body.voices), body.tenant, body.revision, body.top,
                          body.newer_than, body.older_than)
    descriptor = await asyncio.to_thread(publisher.build, selection, body.base)
    return JSONResponse(descriptor, status_code=201, headers={"Location": descriptor["url"]})


@router.head("/v1/packs/{pack}", include_in_schema=False, dependencies=[Depends(admin_only)])
@router.get("/v1/packs/{pack}", dependencies=[Depends(admin_only)], response_class=Response,
            responses={200: {"content": {PACK_MEDIA_TYPE: {}}}, 206: {}})
async def download_pack(pack: str, request: Request) -> Response:
    """The pack file (``Range`` and ``If-Range`` honoured: a cut download resumes)."""
    path = _publisher(request).path(pack)
    return FileResponse(path, media_type=PACK_MEDIA_TYPE, filename=f"{pack}.vxpack",
                        headers={"ETag": f'"{pack}"', "Cache-Control": "private, immutable"})


def node_identity(app: FastAPI) -> dict[str, Any]:
    """This node's identity document: its engine and the service's voice aliases — or, on an
    edge, the center's document it mirrors (passed on as it came, so an edge of this edge
    mirrors the center too)."""
    engine = app.state.server.cached.engine
    mirrored = getattr(engine, "identity_doc", None)
    if mirrored is not None:
        return dict(mirrored)
    return identities.describe(engine, app.state.options.voice_aliases)


def is_fallback(engine: Any) -> bool:
    """True for an edge's fallback engine (its revision carries the fallback mark)."""
    from ..upstream.voxcache import FALLBACK_MARK

    return str(engine.model_revision).endswith(FALLBACK_MARK)


def _publisher(request: Request) -> Any:
    publisher = getattr(request.app.state, "packs", None)
    if publisher is None:
        raise NotFound("this server publishes no packs: set [packs] signing_key = \"PATH\" "
                       "(a key from `voxcache pack keygen`) in its config")
    return publisher


def install(app: FastAPI) -> None:
    """Add the routes, the publisher (with a signing key) and the identity record."""
    if is_fallback(app.state.server.cached.engine):
        return  # an edge's fallback app (service.edge): it only answers replayed misses
    app.include_router(router)
    server = app.state.server
    app.state.packs = _open_publisher(app)
    engine = server.cached.engine
    if getattr(engine, "identity_doc", None) is None:  # an edge records its center's itself
        try:
            identities.write_record(server.cache.root, node_identity(app), "served")
        except OSError as exc:
            log.warning("could not record this node's engine identity: %s", exc)


def _open_publisher(app: FastAPI) -> Any:
    table = app.state.settings.extra.get("packs") or {}
    if not isinstance(table, dict) or set(table) - {
            f.name for f in dataclasses.fields(PackSettings)}:
        raise InvalidParameter("[packs] takes one setting: signing_key = \"PATH\"")
    path = PackSettings(**table).signing_key
    if not path:
        return None
    from ..packs.publish import Publisher
    from ..packs.signing import load_signing_key

    key = load_signing_key(path)
    log.info("publishing packs signed by key %s", key.id)
    return Publisher(app.state.server.cache, key, lambda: node_identity(app))
