"""Operational routes: health, readiness, metrics, stats, engine description, the page."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from ..cache import Cache
from ..formats import FORMATS
from .errors import error_body
from .guard import admin_only
from .serving import Server

router = APIRouter()


@router.get("/healthz", tags=["ops"])
async def healthz() -> dict[str, str]:
    """The process is up and its event loop answers."""
    return {"status": "ok"}


@router.get("/readyz", tags=["ops"])
async def readyz(request: Request) -> Response:
    """Ready to serve: 200 while the service answers requests, with the storage's state.

    A cache folder that is full or read-only does not make the service unready: takes
    are rendered and served, just not stored (fail open), so a load balancer must keep
    sending traffic; ``storage.writable`` says so for whoever watches. 503 is for what
    stops the service answering at all: its I/O pool is shut (it is shutting down).
    """
    server: Server = request.app.state.server
    try:
        reason = await server.admission.read(_storage_fault, server.cache.root)
        tiers = await _tiers_now(request, server)
        upstream = await _upstream_now(request, server)
    except RuntimeError:  # the pool refuses work once shut down
        return JSONResponse(error_body("shutting down", "server_error"), status_code=503)
    storage: dict[str, Any] = {"writable": reason is None}
    if reason is not None:
        storage["reason"] = f"{reason}: takes are served but not stored"
    down = [role for role, state in upstream.items() if state["reachable"] is False]
    unready = bool(down) and request.app.state.options.upstream_required
    return JSONResponse({"status": "unready" if unready else "ready",
                         "engine": server.cached.engine.id,
                         "model_revision": server.cached.engine.model_revision,
                         "storage": storage, **tiers, **upstream},
                        status_code=503 if unready else 200)


HEALTH_WAIT = 1.0
"""Longest ``/readyz`` waits for the tiers' health (a hung Redis or S3 takes seconds to
time out; a balancer's probe must not)."""


async def _tiers_now(request: Request, server: Server) -> dict[str, Any]:
    """The tiers' health within ``HEALTH_WAIT``: one check runs at a time (probes that
    arrive meanwhile wait for it), so a hung shared tier cannot pile checks up in the
    I/O pool."""
    state = request.app.state
    check: asyncio.Future[dict[str, Any]] | None = getattr(state, "tier_check", None)
    if check is None or check.done():
        check = asyncio.ensure_future(server.admission.read(_tier_health, server.cache))
        state.tier_check = check
    try:
        return await asyncio.wait_for(asyncio.shield(check), HEALTH_WAIT)
    except TimeoutError:
        return {"tiers": f"no answer within {HEALTH_WAIT:g} s: a shared tier is slow "
                         "(requests are served from the local tiers meanwhile)"}


async def _upstream_now(request: Request, server: Server) -> dict[str, Any]:
    """The upstream's (or center's) state by role: probed when no call said anything
    recently, one probe at a time, waited for at most ``HEALTH_WAIT`` — past it, what
    is known now (a probe of a hung upstream takes ``health.PROBE_SECONDS``)."""
    reachability = getattr(server.cached.engine, "reachability", None)
    if reachability is None:
        return {}
    state = request.app.state
    check: asyncio.Future[list[dict[str, Any]]] | None = getattr(state, "upstream_check", None)
    if check is None or check.done():
        check = asyncio.ensure_future(server.admission.read(reachability))
        state.upstream_check = check
    try:
        found = await asyncio.wait_for(asyncio.shield(check), HEALTH_WAIT)
    except TimeoutError:
        found = reachability(refresh=False)
    return {entry.pop("role"): entry for entry in (dict(item) for item in found)}


def _tier_health(cache: Cache) -> dict[str, Any]:
    """Each tier's state (``ok``, ``degraded``, ``down`` with why) and, with Redis, the bus's
    and the leases'. A shared tier that is down does not make the service unready: requests
    are answered from the local tiers and the engine (fail open), retried without a restart.
    The details name no password (the tiers redact their URLs)."""
    health = {name: {"state": state.state, **({"detail": state.detail} if state.detail else {})}
              for name, state in cache.tiers.health().items()}
    nodes = cache.nodes.health()
    return {"tiers": health, **({"nodes": nodes} if nodes else {})}


def _storage_fault(root: os.PathLike[str]) -> str | None:
    """Why the cache folder cannot take a new file now, or None when it can.

    The probe is a new file (``O_EXCL``: never one planted there, never through a symlink)
    with a random name, 0600, and it is removed whatever happens — also when the write
    fails for lack of space, which is when a probe file is easiest to leave behind. The
    reason names the fault, not the path (this route needs no key).
    """
    probe = os.path.join(root, f".tmp-ready-{os.getpid()}-{secrets.token_hex(6)}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        return _reason(exc)
    try:
        os.write(fd, b"ok")
        return None
    except OSError as exc:
        return _reason(exc)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)


def _reason(exc: OSError) -> str:
    return (exc.strerror or type(exc).__name__).lower()


@router.get("/metrics", tags=["ops"], response_class=Response,
            dependencies=[Depends(admin_only)])
async def metrics(request: Request) -> Response:
    """Prometheus exposition (scraped in the I/O pool: it reads the index). Once any API key
    is configured it needs an ``[admin]`` key: the figures cover every tenant."""
    server: Server = request.app.state.server
    body = await server.admission.read(server.metrics.exposition)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/stats", tags=["ops"], dependencies=[Depends(admin_only)])
async def stats(request: Request) -> dict[str, Any]:
    """Cache totals and counters, and this process's render queue (no keys, no texts) and
    pid (which of ``--workers`` answered); an ``[admin]`` key once any API key is
    configured."""
    server: Server = request.app.state.server
    data = await server.admission.read(server.cache.stats)
    data.pop("root", None)
    return {**data, "pid": os.getpid(), "renders": {"running": server.admission.running,
                                "queued": server.admission.queued,
                                "slots": server.admission.concurrency,
                                "queue_limit": server.admission.queue}}


@router.get("/v1/engine", tags=["ops"])
async def engine(request: Request) -> dict[str, Any]:
    """The engine: voices, languages, parameters, and the delivery formats available."""
    server: Server = request.app.state.server
    return {**server.cached.engine.describe(), "formats": list(FORMATS),
            "supports_cloning": server.cached.engine.supports_reference,
            "supports_instruct": server.cached.engine.supports_instruct}


PAGE_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
               "img-src 'self' data:; media-src 'self' blob:; connect-src 'self'; "
               "frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
"""The page runs only the scripts this service ships (no inline script, nothing from
elsewhere): a phrase a tenant sent that slipped into the page as markup could not run."""


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard() -> HTMLResponse:
    """The speak box and the operator's dashboard (``static/dashboard.html``; its figures
    come from ``/v1/dashboard``)."""
    page = resources.files("voxcache.service").joinpath("static/dashboard.html")
    return HTMLResponse(page.read_text(encoding="utf-8"),
                        headers={"Content-Security-Policy": PAGE_POLICY,
                                 "X-Content-Type-Options": "nosniff"})
