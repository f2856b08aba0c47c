"""``voxcache serve``: the HTTP service on uvicorn.

Safe by default: without API keys it binds only to loopback (an open TTS server is an
open CPU and, with cloning, an open voice-forgery service); ``--allow-public`` says the
operator means it. ``--workers`` share one cache folder (per-key file locks: one render
across them). SIGTERM drains in-flight requests (``--graceful-timeout``), then flushes;
idle or slowloris connections are closed after ``[service] header_timeout``.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import logging
import os
import sys

from ..errors import InvalidParameter
from ..logs import configure
from .common import settings_from

log = logging.getLogger("voxcache.serve")


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``serve`` command."""
    p = subparsers.add_parser("serve", help="run the HTTP service (OpenAI-compatible and native)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--workers", type=int, default=1, help="worker processes sharing the cache")
    p.add_argument("--allow-public", action="store_true",
                   help="bind a non-loopback address even without API keys")
    p.add_argument("--upstream", metavar="KIND=URL",
                   help="caching gateway: render misses on a running TTS server; KIND is "
                        "gpt-sovits, cosyvoice, openai, piper-http, or voxcache (an edge in "
                        "front of a central voxcache, docs/operating/edge.md)")
    p.add_argument("--upstream-revision", metavar="LABEL",
                   help="label of the model behind --upstream; change it when that model changes")
    p.add_argument("--graceful-timeout", type=float, default=30.0,
                   help="seconds to let in-flight requests finish on shutdown")
    p.add_argument("--no-access-log", action="store_true",
                   help="no per-request log line ([service] access_log = false)")
    p.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    """Check the bind address, log what runs, and hand over to uvicorn."""
    import uvicorn

    from ..runtime import describe_limits, open_cached_engine
    from ..service.app import create_app
    from ..service.options import service_options
    from ..service.protocol import uvicorn_options

    if args.no_access_log:  # through the environment, so --workers processes see it too
        os.environ["VOXCACHE_SERVICE_ACCESS_LOG"] = "0"
    settings = settings_from(args, upstream=args.upstream,
                             upstream_revision=args.upstream_revision)
    options = service_options(settings, allow_public=args.allow_public or None)
    if not options.api_keys and not options.allow_public and not _is_loopback(args.host):
        raise InvalidParameter(
            f"refusing to bind {args.host} with no API keys configured: anyone on the network "
            "could use this server. Add [tenants.NAME] api_keys to the config, bind 127.0.0.1, "
            "or pass --allow-public")
    if args.workers < 1:
        raise InvalidParameter("--workers must be at least 1")
    # voxcache's loggers at INFO; uvicorn applies the same config in each --workers process
    log_config = configure(settings.log_format, verbose=args.verbose, level=logging.INFO)
    cached = open_cached_engine(settings)
    limits = {**describe_limits(settings, cached), "service": options.describe(),
              "workers": args.workers}
    log.info("starting: %s", json.dumps(limits, default=str))
    address = f"http://{_url_host(args.host)}:{args.port}"
    print(f"voxcache: serving {cached.engine.id} ({cached.engine.model_revision}) on {address} "
          f"— cache {settings.cache_dir}", flush=True)
    common = {"host": args.host, "port": args.port, **uvicorn_options(options),
              "log_config": log_config,
              "timeout_graceful_shutdown": args.graceful_timeout}
    if args.workers == 1:
        uvicorn.run(create_app(settings, options=options, cached=cached), **common)
        return 0
    cached.cache.close()
    _export(args, settings)
    uvicorn.run("voxcache.service.app:app_from_environment", factory=True,
                workers=args.workers, **common)
    return 0


def _export(args: argparse.Namespace, settings: object) -> None:
    """Hand the command-line settings to worker processes through the environment."""
    os.environ["VOXCACHE_DIR"] = str(settings.cache_dir)  # type: ignore[attr-defined]
    os.environ["VOXCACHE_ENGINE"] = settings.engine  # type: ignore[attr-defined]
    for name in ("engine_options", "upstream", "upstream_revision", "upstream_timeout",
                 "upstream_options"):
        value = getattr(settings, name)
        if value:
            os.environ[f"VOXCACHE_{name.upper()}"] = (
                json.dumps(value) if isinstance(value, dict) else str(value))
    if args.config:
        os.environ["VOXCACHE_CONFIG"] = os.path.abspath(args.config)
    sys.stdout.flush()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
