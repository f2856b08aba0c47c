"""Fixtures shared by every test: cache folders and engines (real Piper and the tone engine)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
"""Piper parameters under which its output is byte-identical run to run."""


@pytest.fixture(scope="session")
def piper():
    """The real Piper engine with the bundled voice (loaded once for the session)."""
    from voxcache.engines.piper import PiperEngine

    return PiperEngine(threads=2)


@pytest.fixture
def tone() -> ToneEngine:
    """A fresh deterministic engine that records what reached it."""
    return ToneEngine()


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"


@pytest.fixture
def cache(cache_dir: Path) -> Iterator[Cache]:
    c = Cache(cache_dir, CacheConfig())
    yield c
    c.close()


@pytest.fixture
def cached_tone(tone: ToneEngine, cache: Cache) -> CachedEngine:
    return CachedEngine(tone, cache)


@pytest.fixture
def cached_piper(piper, cache: Cache) -> CachedEngine:
    return CachedEngine(piper, cache)
