"""Streaming from segments: a cached first sentence plays before the engine finishes."""

from __future__ import annotations

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest


def test_first_audio_comes_from_the_cache_while_the_rest_renders(cache: Cache,
                                                                gated_tone) -> None:
    engine = gated_tone
    cached = CachedEngine(engine, cache, segments=True, lock_wait=10)
    cached.synthesize(SynthesisRequest("Welcome aboard."))
    engine.gate.clear()  # from now on the engine cannot finish until we say so
    chunks = cached.stream(SynthesisRequest("Welcome aboard. The doors are closing."))
    first = next(chunks)  # would block (then fail) if it waited for the render
    assert first.pcm == cached.synthesize(SynthesisRequest("Welcome aboard.")).audio.pcm
    engine.gate.set()
    rest = list(chunks)
    assert len(rest) == 1
    whole = cached.synthesize(SynthesisRequest("Welcome aboard. The doors are closing."))
    assert whole.cache == "hit" and whole.audio.pcm == first.pcm + rest[0].pcm
    assert engine.calls[-1] == "The doors are closing."


def test_stream_of_a_whole_request_and_of_a_hit(cache: Cache) -> None:
    cached = CachedEngine(ToneEngine(), cache)
    chunks = list(cached.stream(SynthesisRequest("One. Two.")))
    assert len(chunks) == 2  # the engine's own sentence chunks, through the flight
    again = list(cached.stream(SynthesisRequest("One. Two.")))
    assert [c.pcm for c in again] == [b"".join(c.pcm for c in chunks)]
