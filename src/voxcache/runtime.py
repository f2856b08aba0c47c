"""Assemble a working cache + engine from settings (shared by the CLI and the service)."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path

from .cache import Cache
from .cached import CachedEngine
from .config import Settings
from .engine import Engine
from .engines import load_engine
from .errors import InvalidParameter
from .policies.admit import GateSettings, gate_settings
from .references import ReferenceFolders

log = logging.getLogger("voxcache")


def open_cache(settings: Settings, settled: bool = False) -> Cache:
    """Open the cache folder described by ``settings``; ``settled``: wait until its index
    holds every stored entry (``DiskTier.settle``), for commands that report from it."""
    cache = Cache(settings.cache_dir, settings.cache_config())
    if settled:
        cache.folder.settle()
    return cache


def open_cached_engine(settings: Settings, cache: Cache | None = None) -> CachedEngine:
    """Load the configured engine and put it behind the cache.

    The reference folders are checked here, at start, for every engine: the ``/tts``
    route reads through them too, and a root overlapping the cache must stop the
    process rather than the first request that names a path."""
    reference_folders(settings, per_tenant=has_api_keys(settings))
    engine = load_configured_engine(settings)
    from .policies.segments import enabled

    cache = cache or open_cache(settings)
    attach = getattr(engine, "attach", None)
    if attach is not None:  # an upstream: the revision in force recorded in the cache folder
        attach(cache)
    return CachedEngine(engine, cache, lock_wait=settings.lock_wait,
                        max_text_chars=settings.max_text_chars,
                        segments=enabled(settings.segments, engine),
                        seed_policy=settings.seed_policy, model_policy=settings.model_policy,
                        gate=configured_gate(settings))


def configured_gate(settings: Settings) -> GateSettings:
    """The ``[admission]``, ``[tenants.*.admission]``, ``[quality]`` and ``[savings]``
    tables (the environment overriding the file)."""
    return gate_settings(settings.extra, os.environ)


def load_configured_engine(settings: Settings) -> Engine:
    """The upstream when ``settings.upstream`` names one (gateway mode), else a built-in."""
    if settings.upstream:
        from .upstream import load_upstream, parse_upstream

        options = upstream_options(settings)
        if parse_upstream(settings.upstream)[0] == "gpt-sovits":
            # the one protocol that names reference clips by path: it reads them through these
            options["references"] = reference_folders(settings, has_api_keys(settings))
        return load_upstream(settings.upstream, **options)
    options = dict(settings.engine_options)
    if settings.engine == "piper":
        options.setdefault("threads", settings.piper_threads)
    return load_engine(settings.engine, **options)


def upstream_options(settings: Settings) -> dict[str, object]:
    """``upstream_options`` with ``upstream_timeout`` and ``upstream_revision`` folded in as
    ``timeout`` and ``revision``: either spelling works; both, with different values, is
    refused (which one was meant cannot be guessed)."""
    options = dict(settings.upstream_options)
    for name, setting in (("timeout", "upstream_timeout"), ("revision", "upstream_revision")):
        value = getattr(settings, setting)
        default = Settings.__dataclass_fields__[setting].default
        if name not in options:
            if value is not None:
                options[name] = value
        elif value != default and value != options[name]:
            raise InvalidParameter(
                f"{setting} = {value!r} and upstream_options {name} = {options[name]!r} "
                f"disagree; set one of them")
    return options


def reference_folders(settings: Settings, per_tenant: bool) -> ReferenceFolders:
    """The reference roots of ``settings`` (resolved once per process, so a root swapped for a
    symlink later does not move them); ``per_tenant`` when the service has API keys."""
    return _reference_folders(tuple(settings.reference_roots), Path(settings.cache_dir),
                              settings.reference_max_bytes, per_tenant)


@functools.lru_cache(maxsize=16)
def _reference_folders(roots: tuple[Path, ...], cache_dir: Path, max_bytes: int,
                       per_tenant: bool) -> ReferenceFolders:
    return ReferenceFolders(roots, max_bytes=max_bytes, per_tenant=per_tenant,
                            cache_dir=cache_dir)


def has_api_keys(settings: Settings) -> bool:
    """Whether the ``[tenants.*]`` tables give any API key (then every tenant is confined to
    its own reference sub-folder); the service reads the keys themselves in its options."""
    tenants = settings.extra.get("tenants") or {}
    return any((table or {}).get("api_keys") for table in tenants.values())


def describe_limits(settings: Settings, cached: CachedEngine) -> dict[str, object]:
    """Return what a process runs with: engine, model revision, tiers and their limits."""
    return {
        "engine": cached.engine.id,
        "engine_options": settings.engine_options,
        "model_revision": cached.engine.model_revision,
        "cache_dir": str(settings.cache_dir),
        **cached.cache.config.describe(),
        "lock_wait_seconds": settings.lock_wait,
        "max_text_chars": settings.max_text_chars,
        "reference_roots": [str(r) for r in settings.reference_roots],
        "reference_max_bytes": settings.reference_max_bytes,
        "segments": cached.segments,
        "seed_policy": str(cached.seed_policy),
        "model_policy": cached.model_policy,
        "admission": {"never_store": list(cached.gate.settings.admission.never_store),
                      "admit_after": cached.gate.settings.admission.admit_after,
                      "tenants": sorted(cached.gate.settings.tenants)},
        "quality": {"enabled": cached.gate.settings.quality.enabled,
                    "on_fail": cached.gate.settings.quality.on_fail,
                    "asr": cached.gate.settings.quality.asr},
    }
