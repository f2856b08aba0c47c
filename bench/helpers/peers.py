"""The peers voxcache is measured against, built through their public APIs only.

``tts-cache`` (PyPI) is the direct peer: a content-addressed TTS cache with local storage
and an SQLite index. Its native surface is asyncio (``await cache.get(text)``), so hits are
timed inside a running event loop, which is its fastest path; ``python-diskcache`` is the
general-purpose disk cache most Python users would reach for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .core import Stats

TTS_PROVIDER = "piper"
TTS_VOICE = "alto"


def tts_cache_disk(root: Path, **options: Any) -> Any:
    """A tts-cache over local files and SQLite, as its README configures it."""
    from tts_cache import LocalStorage, SqliteIndex, TTSCache

    root.mkdir(parents=True, exist_ok=True)
    return TTSCache(storage=LocalStorage(root / "audio"), index=SqliteIndex(root / "index.db"),
                    provider=TTS_PROVIDER, voice_id=TTS_VOICE, audio_format="wav", **options)


def tts_cache_memory(**options: Any) -> Any:
    """tts-cache's default in-process store and index (its fastest configuration)."""
    from tts_cache import TTSCache

    return TTSCache(provider=TTS_PROVIDER, voice_id=TTS_VOICE, audio_format="wav", **options)


def async_sample(call: Callable[[], Awaitable[Any]], repeats: int, warmup: int = 3) -> Stats:
    """Time an awaitable call by call inside one event loop (like ``core.sample``)."""

    async def measure() -> Stats:
        for _ in range(warmup):
            await call()
        samples = []
        for _ in range(repeats):
            started = time.perf_counter()
            await call()
            samples.append(time.perf_counter() - started)
        return Stats.of(samples)

    return asyncio.run(measure())


def diskcache_at(root: Path) -> Any:
    """A python-diskcache ``Cache`` with its defaults (values over 32 KiB live in files)."""
    import diskcache

    return diskcache.Cache(str(root))
