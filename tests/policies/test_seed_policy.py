"""Seed policy for unseeded requests: pin, bypass, variants:N."""

from __future__ import annotations

import pytest

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.errors import InvalidParameter
from voxcache.request import SynthesisRequest

TEXT = "Your table is ready."


class CountingTone(ToneEngine):
    """A tone engine whose takes differ on every render, like a sampling model."""

    def render(self, request):
        self.renders = getattr(self, "renders", 0) + 1
        for chunk in super().render(request):
            yield type(chunk)(chunk.pcm[:-2] + self.renders.to_bytes(2, "little"),
                              chunk.sample_rate, chunk.channels)


def entries(cache: Cache) -> int:
    cache.folder.flush()
    return cache.folder.index.totals()[1]


def test_variants_piper_default_noise(piper, cache: Cache) -> None:
    cached = CachedEngine(piper, cache, seed_policy="variants:3")
    takes = [cached.synthesize(SynthesisRequest(TEXT)) for _ in range(20)]
    assert cache.session_counts()["syntheses"] == 3
    distinct = {t.audio.pcm for t in takes}
    assert len(distinct) == 3  # Piper's default noise makes every render a new take
    assert [t.take for t in takes[:6]] == [0, 1, 2, 0, 1, 2]
    assert entries(cache) == 3


def test_variants_random_order_with_a_counting_engine(cache: Cache) -> None:
    engine = CountingTone()
    cached = CachedEngine(engine, cache)
    takes = [cached.synthesize(SynthesisRequest(TEXT, seed_policy="variants:3:random"))
             for _ in range(20)]
    assert engine.renders == 3
    assert len({t.audio.pcm for t in takes}) == 3
    assert [t.cache for t in takes[:3]] == ["miss"] * 3


def test_bypass_renders_every_time_and_stores_nothing(piper, cache: Cache) -> None:
    cached = CachedEngine(piper, cache, seed_policy="bypass")
    results = [cached.synthesize(SynthesisRequest(TEXT)) for _ in range(3)]
    assert [r.cache for r in results] == ["bypass"] * 3
    assert not any(r.stored for r in results)
    assert cache.session_counts()["bypasses"] == 3
    assert entries(cache) == 0 and cache.get(results[0].key) is None


def test_pin_renders_once(piper, cache: Cache) -> None:
    cached = CachedEngine(piper, cache)  # pin is the default
    results = [cached.synthesize(SynthesisRequest(TEXT)) for _ in range(5)]
    assert cache.session_counts()["syntheses"] == 1
    assert len({r.audio.pcm for r in results}) == 1


def test_explicit_seed_ignores_the_policy(cache: Cache) -> None:
    engine = CountingTone()
    cached = CachedEngine(engine, cache, seed_policy="bypass")
    for _ in range(3):
        cached.synthesize(SynthesisRequest(TEXT, seed=7))
    assert engine.renders == 1
    info = cached.explain(SynthesisRequest(TEXT, seed=7))
    assert info["seed_policy"]["policy"] == "explicit-seed"
    assert cached.explain(SynthesisRequest(TEXT, seed=-1))["seed_policy"]["policy"] == "bypass"


def test_pin_and_variants_share_the_first_take(cache: Cache) -> None:
    engine = CountingTone()
    pinned = CachedEngine(engine, cache).synthesize(SynthesisRequest(TEXT))
    first = CachedEngine(engine, cache, seed_policy="variants:2").synthesize(
        SynthesisRequest(TEXT))
    assert (first.take, first.cache) == (1, "miss")  # take 0 is the pinned take
    assert first.key != pinned.key and engine.renders == 2


def test_bad_policy_is_refused(cache: Cache) -> None:
    with pytest.raises(InvalidParameter, match="variants:N"):
        CachedEngine(ToneEngine(), cache, seed_policy="sometimes")
    cached = CachedEngine(ToneEngine(), cache)
    with pytest.raises(InvalidParameter):
        cached.synthesize(SynthesisRequest(TEXT, seed_policy="variants:0"))
