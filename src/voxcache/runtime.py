"""Assemble a working cache + engine from settings (shared by the CLI and the service)."""

from __future__ import annotations

import logging

from .cache import Cache
from .cached import CachedEngine
from .config import Settings
from .engine import Engine
from .engines import load_engine

log = logging.getLogger("voxcache")


def open_cache(settings: Settings) -> Cache:
    """Open the cache folder described by ``settings``."""
    return Cache(settings.cache_dir, settings.cache_config())


def open_cached_engine(settings: Settings, cache: Cache | None = None) -> CachedEngine:
    """Load the configured engine and put it behind the cache."""
    engine = load_configured_engine(settings)
    from .segments import enabled

    return CachedEngine(engine, cache or open_cache(settings), lock_wait=settings.lock_wait,
                        max_text_chars=settings.max_text_chars,
                        segments=enabled(settings.segments, engine),
                        seed_policy=settings.seed_policy, model_policy=settings.model_policy)


def load_configured_engine(settings: Settings) -> Engine:
    """The upstream when ``settings.upstream`` names one (gateway mode), else a built-in."""
    if settings.upstream:
        from .upstream import load_upstream

        return load_upstream(settings.upstream, revision=settings.upstream_revision,
                             timeout=settings.upstream_timeout, **settings.upstream_options)
    options = {"threads": settings.piper_threads} if settings.engine == "piper" else {}
    return load_engine(settings.engine, **options)


def describe_limits(settings: Settings, cached: CachedEngine) -> dict[str, object]:
    """Return what a process runs with: engine, model revision, tiers and their limits."""
    return {
        "engine": cached.engine.id,
        "model_revision": cached.engine.model_revision,
        "cache_dir": str(settings.cache_dir),
        **cached.cache.config.describe(),
        "lock_wait_seconds": settings.lock_wait,
        "max_text_chars": settings.max_text_chars,
        "segments": cached.segments,
        "seed_policy": str(cached.seed_policy),
        "model_policy": cached.model_policy,
    }
