"""Encoded variants: encoded once, cached as `encoded` entries, evicted before their PCM."""

from __future__ import annotations

import io

import pytest
import soundfile

from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.encoded import encoded, encoded_key
from voxcache.engines.tone import ToneEngine
from voxcache.formats import FORMATS
from voxcache.request import SynthesisRequest


@pytest.mark.parametrize("fmt", [f for f in ("flac", "mp3", "opus") if f in FORMATS])
def test_encoded_once_then_served_from_the_cache(cached_tone: CachedEngine, fmt: str) -> None:
    result = cached_tone.synthesize(SynthesisRequest("Your order is ready."))
    first = encoded(cached_tone, result, fmt)
    again = encoded(cached_tone, result, fmt)
    assert first == again
    counts = cached_tone.cache.session_counts()
    assert (counts["encoded_misses"], counts["encoded_hits"]) == (1, 1)
    samples, rate = soundfile.read(io.BytesIO(first))
    assert rate > 0 and len(samples) > 0
    on_disk = cached_tone.cache.disk.get(encoded_key(result.key, fmt), "encoded")
    assert on_disk is not None and on_disk.header.meta["parent"] == result.key


def test_flac_round_trips_the_pcm(cached_tone: CachedEngine) -> None:
    result = cached_tone.synthesize(SynthesisRequest("Lossless please."))
    samples, _ = soundfile.read(io.BytesIO(encoded(cached_tone.cache, result, "flac")),
                                dtype="int16")
    assert samples.tobytes() == result.audio.pcm


def test_wav_and_pcm_are_the_stored_take(cached_tone: CachedEngine) -> None:
    result = cached_tone.synthesize(SynthesisRequest("Passthrough."))
    assert encoded(cached_tone, result, "wav") == result.wav
    assert encoded(cached_tone, result, "pcm") == result.audio.pcm


def test_encodings_are_evicted_before_pcm(tmp_path) -> None:
    cache = Cache(tmp_path / "c", CacheConfig(disk_max_entries=6))
    cached = CachedEngine(ToneEngine(), cache)
    results = [cached.synthesize(SynthesisRequest(f"Phrase {i}.")) for i in range(3)]
    for r in results:
        encoded(cached, r, "flac")  # 6 entries: 3 PCM + 3 encodings
    cached.synthesize(SynthesisRequest("One more phrase."))  # crosses the cap
    cache.disk.flush()
    kinds = [row.kind for row in cache.disk.index.rows()]
    assert kinds.count("audio") == 4 and kinds.count("encoded") < 3
    cache.close()
