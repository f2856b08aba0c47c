"""Encoded variants: encoded once, cached as `encoded` entries, evicted by what they are worth."""

from __future__ import annotations

import io

import pytest
import soundfile

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.encoded import encoded, encoded_key
from voxcache.engines.tone import ToneEngine
from voxcache.entry import Entry, audio_entry
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
    on_disk = cached_tone.cache.folder.get(encoded_key(result.key, fmt), "encoded")
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


SLOW = [SynthesisRequest(f"Phrase {i}.", params={"delay": 0.2}) for i in range(2)]
"""Two takes that each cost 0.2 s of (simulated) engine time, recorded by the cache."""


def _filler(i: int) -> Entry:
    return audio_entry(f"{i:064x}", Audio(bytes(2000), 16000), now=1.0)


def test_an_encoding_cheap_to_derive_again_goes_before_a_take_that_cost_engine_seconds(
        tmp_path) -> None:
    """At equal popularity the eviction policy keeps what costs more to make again per
    byte: a take that cost engine seconds, not its encoding (milliseconds from the PCM)."""
    cache = Cache(tmp_path / "c", CacheConfig(memory_default_budget=0, disk_max_entries=4))
    cached = CachedEngine(ToneEngine(), cache)
    results = [cached.synthesize(request) for request in SLOW]
    for r in results:
        encoded(cached, r, "flac")  # 4 entries: 2 takes + 2 encodings, each asked once
    for _ in range(2):  # and twice more, every one of them
        for request, r in zip(SLOW, results, strict=True):
            assert cached.synthesize(request).tier == "disk"
            encoded(cached, r, "flac")
    assert cache.session_counts()["encoded_hits"] == 4
    cache.put(_filler(1), pinned=True)  # crosses the cap: two entries have to go
    rows = cache.folder.index.rows()
    assert sorted(row.kind for row in rows) == ["audio", "audio", "audio"]
    assert {r.key for r in results} <= {row.key for row in rows}
    cache.close()


def test_an_encoding_asked_all_day_outlives_takes_nobody_asks_for_again(tmp_path) -> None:
    """Cheap to derive again is a price per byte, not a rank: an encoding that every client
    asks for is worth keeping over takes asked once (every encoding used to go first)."""
    cache = Cache(tmp_path / "c", CacheConfig(memory_default_budget=0, disk_max_entries=4))
    cached = CachedEngine(ToneEngine(), cache)
    results = [cached.synthesize(request) for request in SLOW]
    for _ in range(30):
        encoded(cached, results[0], "flac")
    cache.put(_filler(1), pinned=True)
    cache.put(_filler(2), pinned=True)  # crosses the cap: two entries have to go
    rows = cache.folder.index.rows()
    assert sorted(row.kind for row in rows) == ["audio", "audio", "encoded"]  # pins, encoding
    assert not {r.key for r in results} & {row.key for row in rows}
    cache.close()


def test_a_burst_for_one_new_delivery_encodes_it_once(cached_tone: CachedEngine,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Encoded deliveries take the load-once path every take takes: eight callers asking at
    once for one new mp3 get one encoding between them (each used to encode its own)."""
    import threading
    import time

    import voxcache.encoded as encoded_module

    result = cached_tone.synthesize(SynthesisRequest("A delivery everyone wants at once."))
    real_encode, encodes = encoded_module.encode, []

    def slow_encode(audio, fmt):  # the real encoder, made slow enough to overlap
        encodes.append(fmt.name)
        time.sleep(0.3)
        return real_encode(audio, fmt)

    monkeypatch.setattr(encoded_module, "encode", slow_encode)
    start = threading.Barrier(8)
    got: list[bytes] = []

    def ask() -> None:
        start.wait()
        got.append(encoded(cached_tone, result, "mp3"))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == 8 and len(set(got)) == 1
    assert encodes == ["mp3"], f"{len(encodes)} encodings for one delivery"
