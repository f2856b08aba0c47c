"""Assemble a working cache + engine from settings (shared by the CLI and the service)."""

from __future__ import annotations

import logging

from .cache import Cache
from .cached import CachedEngine
from .config import Settings
from .engines import load_engine

log = logging.getLogger("voxcache")


def open_cache(settings: Settings) -> Cache:
    """Open the cache folder described by ``settings``."""
    return Cache(settings.cache_dir, settings.cache_config())


def open_cached_engine(settings: Settings, cache: Cache | None = None) -> CachedEngine:
    """Load the configured engine and put it behind the cache."""
    options = {"threads": settings.piper_threads} if settings.engine == "piper" else {}
    engine = load_engine(settings.engine, **options)
    return CachedEngine(engine, cache or open_cache(settings), lock_wait=settings.lock_wait,
                        max_text_chars=settings.max_text_chars)


def describe_limits(settings: Settings, cached: CachedEngine) -> dict[str, object]:
    """Return what a process runs with: engine, model revision, tiers and their limits."""
    return {
        "engine": cached.engine.id,
        "model_revision": cached.engine.model_revision,
        "cache_dir": str(settings.cache_dir),
        **cached.cache.config.describe(),
        "lock_wait_seconds": settings.lock_wait,
        "max_text_chars": settings.max_text_chars,
    }
