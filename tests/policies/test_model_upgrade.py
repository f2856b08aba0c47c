"""Model upgrades: strict misses old takes; stale-while-revalidate serves them once."""

from __future__ import annotations

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest

TEXT = "Doors closing. Please stand clear of the doors."


def first_take(cache: Cache) -> bytes:
    old = CachedEngine(ToneEngine(model_revision="tone-1"), cache)
    return old.synthesize(SynthesisRequest(TEXT)).audio.pcm


def test_strict_misses_after_a_revision_change(cache: Cache) -> None:
    first_take(cache)
    engine = ToneEngine(model_revision="tone-2")
    result = CachedEngine(engine, cache).synthesize(SynthesisRequest(TEXT))
    assert result.cache == "miss" and engine.calls == [TEXT]


def test_stale_while_revalidate_serves_stale_once_then_the_new_take(cache: Cache) -> None:
    old_pcm = first_take(cache)
    engine = ToneEngine(model_revision="tone-2")
    cached = CachedEngine(engine, cache, model_policy="stale-while-revalidate")
    stale = cached.synthesize(SynthesisRequest(TEXT))
    assert stale.cache == "stale" and stale.audio.pcm == old_pcm
    assert cached.revalidator.wait_idle(timeout=30)
    assert engine.calls == [TEXT]  # re-rendered once, in the background
    fresh = cached.synthesize(SynthesisRequest(TEXT))
    assert fresh.cache == "hit" and fresh.audio.pcm != old_pcm
    assert engine.calls == [TEXT]


def test_stale_is_only_for_an_older_revision(cache: Cache) -> None:
    cached = CachedEngine(ToneEngine(), cache, model_policy="swr")
    assert cached.synthesize(SynthesisRequest(TEXT)).cache == "miss"
    other = cached.synthesize(SynthesisRequest(TEXT, voice="bass"))
    assert other.cache == "miss"  # another voice is another lineage, never stale
