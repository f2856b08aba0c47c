"""Fixtures for the gateway tests: a real Piper HTTP server and a gateway app in front."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from voxcache.cached import CachedEngine
from voxcache.protocols.cosyvoice import route as cosyvoice
from voxcache.protocols.gpt_sovits import route as gpt_sovits

from .servers import PiperHttpServer, piper_http_server


@pytest.fixture(scope="module")
def piper_upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PiperHttpServer]:
    """Piper's own HTTP server, shared by a module's tests (each counts its own requests)."""
    with piper_http_server(tmp_path_factory.mktemp("piper-http")) as server:
        yield server


def gateway_app(cached: CachedEngine) -> FastAPI:
    """The smallest app the protocol routers need: ``app.state.cached`` and the routers."""
    app = FastAPI()
    app.state.cached = cached
    app.include_router(gpt_sovits.router)
    app.include_router(cosyvoice.router)
    return app


@pytest.fixture
def ref_dir(tmp_path: Path) -> Path:
    path = tmp_path / "refs"
    path.mkdir()
    return path
