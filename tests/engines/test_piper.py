"""The core with the real Piper engine: pinned takes, deterministic mode, async."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from voxcache.cached import CachedEngine
from voxcache.request import SynthesisRequest as R

pytestmark = pytest.mark.piper
DET = {"noise_scale": 0.0, "noise_w_scale": 0.0}


def test_repeat_is_a_memory_hit_with_the_same_samples(cached_piper):
    request = R("Good evening. Tomorrow will be cloudy.", params=DET)
    first = cached_piper.synthesize(request)
    second = cached_piper.synthesize(request)
    assert (first.cache, second.cache, second.tier) == ("miss", "hit", "memory")
    assert second.audio == first.audio
    assert first.entry.header.sample_rate == 22050
    samples = first.audio.samples()
    assert samples.size > 22050 * 0.5 and np.abs(samples).max() > 1000  # about a second of speech


def test_random_default_takes_are_pinned(cached_piper, piper):
    """Piper's default noise makes every render different; the cache serves the first take."""
    text = "Please enter your account number."
    first = cached_piper.synthesize(R(text))
    direct = b"".join(chunk.pcm for chunk in piper.render(cached_piper.resolve(R(text))))
    assert direct != first.audio.pcm  # a fresh render differs …
    assert cached_piper.synthesize(R(text)).audio == first.audio  # … the cache does not


def test_deterministic_mode_is_byte_identical_across_cache_folders(piper, tmp_path):
    from voxcache.cache import Cache

    request = R("Reminder: your appointment is tomorrow.", params=DET)
    a = CachedEngine(piper, Cache(tmp_path / "a")).synthesize(request)
    b = CachedEngine(piper, Cache(tmp_path / "b")).synthesize(request)
    assert a.key == b.key and a.audio == b.audio and a.cache == b.cache == "miss"


def test_async_with_piper(cached_piper):
    async def run():
        request = R("Your parcel has been delivered.", params=DET)
        results = await asyncio.gather(*(cached_piper.asynthesize(request) for _ in range(8)))
        return results, await cached_piper.asynthesize(request)

    results, again = asyncio.run(run())
    assert sum(r.cache == "miss" for r in results) == 1
    assert again.cache == "hit" and len({r.audio.pcm for r in results}) == 1


def test_the_voice_does_not_spin_between_operators(piper):
    """onnxruntime's pool threads spin for more work by default, taking CPU a loaded host's
    hits and other renders need (docs/internals/benchmarks.md, bench.probes.onnx_spinning)."""
    options = piper.voice.session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.intra_op_num_threads == piper.threads
