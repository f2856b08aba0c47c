"""The ASGI application: one engine behind the cache, its pools, routes and error mapping.

``create_app`` is what tests and ``voxcache serve`` call; ``app_from_environment``
is the factory uvicorn imports in each ``--workers`` process (settings come from
the same ``VOXCACHE_*`` variables and config file, so every worker is alike and
they share one cache folder — its file locks make a key render once across them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig

from .. import __version__
from ..cached import CachedEngine
from ..config import Settings, load_settings
from ..policies.segments import enabled
from ..protocols.cosyvoice import route as cosyvoice
from ..protocols.gpt_sovits import route as gpt_sovits
from ..protocols.openai import route as openai_route
from ..protocols.piper import route as piper
from ..runtime import open_cached_engine
from ..scheduling import Admission
from . import admin, api_docs, errors, speech, stored, voice_routes
from .access_log import AccessLog
from .edge import EdgeFallback
from .guard import BodyLimit
from .methods import install as install_methods
from .metrics import Metrics
from .options import ServiceOptions, service_options
from .packs import install as install_packs
from .packs import is_fallback
from .plain_routes import HotRoutes
from .serving import Server
from .speech_memo import SpeechMemo
from .stopping import StopSignals, stop_waiting_now
from .voices import VoiceStore

log = logging.getLogger("voxcache.service")

NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False,
                                 "operation_spans": False, "auto_configure": False}
"""FastAPI's own OpenTelemetry hooks, off: the service exports its figures to Prometheus
(/metrics), and the hooks' per-request check of the providers cost every hit ~10 µs."""


def create_app(settings: Settings, *, options: ServiceOptions | None = None,
               cached: CachedEngine | None = None) -> FastAPI:
    """Build the service; ``cached`` lets a caller supply its own engine (tests count calls)."""
    options = options or service_options(settings)
    if options.switch_interval > 0:
        sys.setswitchinterval(options.switch_interval)  # process-wide: this is a server
    cached = cached or open_cached_engine(settings)
    admission = Admission(options.render_concurrency, options.render_queue, options.io_threads)
    metrics = Metrics(cached.cache, lambda: admission.queued, lambda: admission.running,
                      upstream=getattr(cached.engine, "reachability", None),
                      savings=cached.savings)
    server = Server(cached, admission, metrics, options.request_timeout,
                    multi_tenant=bool(options.api_keys))

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        stop = StopSignals()
        restore = stop.watch(cached.engine, options.shutdown_grace)
        log.info("started: process %d serving %s", os.getpid(), cached.engine.id)
        yield
        restore()
        # Graceful shutdown: uvicorn has stopped taking requests; finish renders, flush.
        log.info("stopping (%s): finishing renders, closing the cache", stop.reason)
        stop_waiting_now(cached.engine)  # an upstream call still running must not hold it
        admission.shutdown()
        cached.savings.close()  # the ledger's last additions, before the index closes
        cached.cache.close()
        log.info("stopped (%s): process %d", stop.reason, os.getpid())

    app = FastAPI(title="voxcache", version=__version__, lifespan=lifespan,
                  summary="An inference cache for text-to-speech and voice cloning",
                  telemetry=NO_TELEMETRY, docs_url=None, redoc_url=None)
    api_docs.install(app)  # /docs and /redoc from the vendored copies: they work offline
    app.state.settings = settings
    app.state.options = options
    app.state.server = server
    app.state.voices = VoiceStore(settings.cache_dir / "voices", options.max_upload_seconds,
                                  cached.cache)
    errors.install(app)
    for module in (speech, stored, voice_routes, admin, gpt_sovits, cosyvoice, piper):
        app.include_router(module.router)
    app.include_router(gpt_sovits.control_router)
    install_packs(app)  # /v1/packs routes and the identity record
    stored.install(app)  # the two hot routes, plain Starlette endpoints, first on the router
    openai_route.install(app)
    install_methods(app)  # 405 with every method a path takes (innermost middleware)
    app.add_middleware(HotRoutes, owner=app)  # a hot route's request: straight to its endpoint
    edge = cached.engine
    if getattr(edge, "fallback_engine", None) is not None and not is_fallback(edge):
        app.add_middleware(EdgeFallback, edge=edge, fallback=fallback_app(app, edge))
    app.state.speech_memo = SpeechMemo()  # the speech route's decisions, by request
    app.add_middleware(BodyLimit, options=options)
    app.add_middleware(AccessLog, enabled=options.access_log)
    # -- the operator's dashboard (issue 13): workers' shared history, response timing,
    #    /v1/dashboard and this worker's sampler (outermost: it times every answer) --
    from .dashboard import install as install_dashboard

    install_dashboard(app, settings)
    # -- end of the operator's dashboard --
    return app


def fallback_app(app: FastAPI, edge: Any) -> FastAPI:
    """An edge's fallback: a second app over the same folder with the fallback engine
    (``service.edge``), whose revision is marked so its keys are never the center's."""
    settings, options = app.state.settings, app.state.options
    cached = app.state.server.cached
    engine = edge.fallback_engine
    fallback = CachedEngine(
        engine, cached.cache, lock_wait=cached.lock_wait, max_text_chars=cached.max_text_chars,
        segments=enabled(settings.segments, engine), seed_policy=settings.seed_policy)
    # access_log off: the edge's own line covers the request
    return create_app(settings, options=dataclasses.replace(options, access_log=False),
                      cached=fallback)


def app_from_environment() -> FastAPI:
    """uvicorn factory for worker processes: settings from ``VOXCACHE_*`` and the config file."""
    return create_app(load_settings())
