"""Fixtures for the service: an app over a tone or Piper engine, and real uvicorn servers.

``live_server`` runs uvicorn in a thread of the test process (so a test can
count the engine's calls); ``serve_process`` runs ``voxcache serve`` as a real
subprocess (for --workers, startup logs and shutdown).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import uvicorn

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.config import Settings
from voxcache.engines.tone import ToneEngine
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions, service_options
from voxcache.testing.servers import free_port, serve_process


class LiveServer:
    """A uvicorn server on a free loopback port, in a background thread, configured as
    ``voxcache serve`` configures it (``uvicorn_options`` of the app's service options)."""

    def __init__(self, app: object) -> None:
        # Imported here, not at the top: test modules that never start a LiveServer can then
        # still run against an older voxcache (how a new test is shown to fail before a fix).
        from voxcache.service.protocol import uvicorn_options

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        options = uvicorn_options(app.state.options)  # type: ignore[attr-defined]
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                timeout_graceful_shutdown=5, **options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


AppFactory = Callable[..., tuple[object, CachedEngine]]


@pytest.fixture
def make_app(tmp_path: Path) -> Iterator[AppFactory]:
    """Build apps over a tone engine (or a given engine) in this test's cache folder."""
    caches: list[Cache] = []

    def make(engine: object | None = None, segments: bool = False,
             sections: dict[str, object] | None = None, cache_dir: Path | None = None,
             **options: object) -> tuple[object, CachedEngine]:
        """``sections``: config tables (``tenants``, ``admin``, ``service``…) read the way a
        config file is, through ``service_options`` (``options`` then override [service]
        settings); without them ``options`` are ServiceOptions fields."""
        settings = Settings(cache_dir=cache_dir or tmp_path / "cache", engine="tone",
                            extra=dict(sections or {}))
        cache = Cache(settings.cache_dir, settings.cache_config())
        caches.append(cache)
        cached = CachedEngine(engine or ToneEngine(), cache, segments=segments)
        service = service_options(settings, **options) if sections is not None else \
            ServiceOptions(**options)
        return create_app(settings, options=service, cached=cached), cached

    yield make
    for cache in caches:
        with contextlib.suppress(Exception):
            cache.close()


@pytest.fixture
def tone_server(make_app: AppFactory) -> Iterator[tuple[LiveServer, CachedEngine]]:
    app, cached = make_app()
    with LiveServer(app) as live:
        yield live, cached


@pytest.fixture
def live() -> type[LiveServer]:
    """The LiveServer class (test modules here are not a package, so they get it this way)."""
    return LiveServer


@pytest.fixture(scope="session")
def serve_proc() -> Callable[..., contextlib.AbstractContextManager[tuple[str, object]]]:
    """``serve_process`` for test modules (session-wide, so module fixtures can use it)."""
    return serve_process
