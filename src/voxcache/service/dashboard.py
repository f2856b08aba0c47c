"""The operator's dashboard: its JSON (``GET /v1/dashboard``), its chart library, its sampler.

``install`` (called by ``create_app``) gives the metrics a shared history, times audio
responses, adds the routes and runs this worker's sampler; the page is
``static/dashboard.html``. With no key configured everyone sees everything; with keys an
``[admin]`` key sees the whole service and a tenant's key its own tenant only.
"""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator
from importlib import resources
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import JSONResponse

from ..config import Settings
from .dashboard_figures import DEFAULT_TENANT, Figures, Viewer
from .errors import Unauthorized, error_body
from .guard import presented_key, tenant_for
from .history import History
from .options import ServiceOptions
from .sampler import Sampler, dashboard_settings
from .serving import Server
from .timing import ResponseTiming

router = APIRouter()

STATIC = {"dashboard.js": "text/javascript; charset=utf-8",
          "vendor/uPlot.iife.min.js": "text/javascript; charset=utf-8",
          "vendor/uPlot.min.css": "text/css; charset=utf-8",
          # /docs and /redoc (service.api_docs)
          "vendor/swagger-ui-bundle.js": "text/javascript; charset=utf-8",
          "vendor/swagger-ui.css": "text/css; charset=utf-8",
          "vendor/swagger-ui-favicon-32x32.png": "image/png",
          "vendor/redoc.standalone.js": "text/javascript; charset=utf-8"}
"""The only files served under ``/static/`` (looked up by name: nothing else can be asked
for, whatever the path spells): the dashboard's script and the vendored libraries of the
dashboard and of the API's pages."""


def install(app: FastAPI, settings: Settings) -> None:
    """Shared history, response timing, the dashboard's routes and this worker's sampler."""
    server: Server = app.state.server
    config = dashboard_settings(settings)
    history = History(server.cache.index, config.interval, config.window,
                      report=server.cache.report_fault, damaged=server.cache.folder.start_repair)
    server.metrics.attach(history, server.admission)
    sampler = Sampler(server.metrics, history, server.cache)
    app.state.dashboard = Figures(server, history, settings.upstream)
    app.include_router(router)
    app.add_middleware(ResponseTiming, metrics=server.metrics)
    inner = app.router.lifespan_context

    @contextlib.asynccontextmanager
    async def lifespan(started: Any) -> AsyncIterator[Any]:
        async with inner(started) as state:
            sampler.start()
            try:
                yield state
            finally:
                sampler.stop()  # before the app's own shutdown closes the cache

    app.router.lifespan_context = lifespan


async def viewer_of(request: Request) -> Viewer:
    """The caller's view (401 when keys are configured and this one is none of them)."""
    options: ServiceOptions = request.app.state.options
    if not options.keyed:
        return Viewer(admin=True, tenant=None, synthesizes_as=DEFAULT_TENANT)
    given = presented_key(request.headers)
    if given and any(hmac.compare_digest(key.encode(), given.encode())
                     for key in options.admin_keys):
        return Viewer(admin=True, tenant=None,
                      synthesizes_as=None if options.api_keys else DEFAULT_TENANT)
    tenant = tenant_for(options.api_keys, request.headers) if options.api_keys else None
    if given and tenant is not None:
        return Viewer(admin=False, tenant=tenant, synthesizes_as=tenant)
    raise Unauthorized("the dashboard's figures need an API key: a key from [admin] api_keys "
                       "shows the whole service, a tenant's key shows that tenant's own; send "
                       "it as 'Authorization: Bearer <key>'" if not given else
                       "unknown API key: the dashboard takes an [admin] key or a tenant's key")


@router.get("/v1/dashboard", tags=["ops"])
async def dashboard(request: Request) -> dict[str, Any]:
    """What the dashboard page draws: current figures, the charts' series and the top
    phrases (see docs/operating/metrics.md). Computed in the I/O pool: it reads the index and the
    shared history."""
    viewer = await viewer_of(request)
    server: Server = request.app.state.server
    figures: Figures = request.app.state.dashboard
    return await server.admission.read(figures.build, viewer)


@router.get("/static/{name:path}", include_in_schema=False)
async def static(name: str) -> Response:
    """The page's script and the pinned libraries shipped with the package (see
    static/vendor/README.md)."""
    media = STATIC.get(name)
    if media is None:
        return JSONResponse(error_body(f"no such file: /static/ serves {', '.join(STATIC)}",
                                       "invalid_request_error"), status_code=404)
    data = resources.files("voxcache.service").joinpath(f"static/{name}").read_bytes()
    return Response(data, media_type=media, headers={"Cache-Control": "no-cache"})
