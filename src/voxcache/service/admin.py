"""Operational routes: health, readiness, metrics, stats, engine description, dashboard."""

from __future__ import annotations

import os
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse

from ..formats import FORMATS
from .errors import error_body
from .guard import tenant_of
from .serving import Server

router = APIRouter()


@router.get("/healthz", tags=["ops"])
async def healthz() -> dict[str, str]:
    """The process is up and its event loop answers."""
    return {"status": "ok"}


@router.get("/readyz", tags=["ops"])
async def readyz(request: Request) -> Response:
    """The engine is loaded and the cache folder is writable (503 otherwise)."""
    server: Server = request.app.state.server
    try:
        await server.admission.read(_probe_writable, server.cache.root)
    except OSError as exc:
        return JSONResponse(error_body(f"cache folder not writable: {exc}", "server_error"),
                            status_code=503)
    return JSONResponse({"status": "ready", "engine": server.cached.engine.id,
                         "model_revision": server.cached.engine.model_revision})


def _probe_writable(root: os.PathLike[str]) -> None:
    probe = os.path.join(root, f".tmp-ready-{os.getpid()}")
    with open(probe, "wb") as f:
        f.write(b"ok")
    os.unlink(probe)


@router.get("/metrics", tags=["ops"], response_class=Response)
async def metrics(request: Request) -> Response:
    """Prometheus exposition (scraped in the I/O pool: it reads the index)."""
    server: Server = request.app.state.server
    body = await server.admission.read(server.metrics.exposition)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/stats", tags=["ops"])
async def stats(request: Request) -> dict[str, Any]:
    """Cache totals and counters, and this process's render queue (no keys, no texts)."""
    await tenant_of(request)  # authenticates; stats are not per tenant
    server: Server = request.app.state.server
    data = await server.admission.read(server.cache.stats)
    data.pop("root", None)
    return {**data, "renders": {"running": server.admission.running,
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


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
async def dashboard() -> HTMLResponse:
    """A page to type text, pick a voice, listen, and see how it was served."""
    page = resources.files("voxcache.service").joinpath("static/dashboard.html")
    return HTMLResponse(page.read_text(encoding="utf-8"))
