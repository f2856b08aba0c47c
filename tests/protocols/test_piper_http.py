"""The gateway in front of a REAL Piper HTTP server (``python -m piper.http_server``).

Upstream requests are counted from the server's own request log, so "the hit did
not reach the upstream" is read from the upstream itself, not from the gateway.
"""

from __future__ import annotations

import httpx
import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.audio import Audio
from voxcache.errors import UnsupportedFeature, UpstreamError
from voxcache.upstream import load_upstream

from .conftest import gateway_app
from .servers import piper_http_server, serve_app

pytestmark = pytest.mark.piper
QUIET = {"noise_scale": 0.0, "noise_w_scale": 0.0}


def test_miss_reaches_upstream_once_then_hits(piper_upstream, cache: Cache) -> None:
    cached = CachedEngine(load_upstream(f"piper-http={piper_upstream.url}"), cache)
    before = piper_upstream.syntheses()
    request = SynthesisRequest("The gateway renders this once.", params=QUIET)

    first = cached.synthesize(request)
    piper_upstream.wait_for_syntheses(before + 1)
    second = cached.synthesize(request)
    # a different text is a miss; once it is logged, everything before it has been too
    cached.synthesize(SynthesisRequest("A different sentence.", params=QUIET))
    piper_upstream.wait_for_syntheses(before + 2)

    assert (first.cache, first.tier) == ("miss", "engine")
    assert second.cache == "hit"
    assert second.audio == first.audio
    assert first.audio.sample_rate == 22050 and first.audio.duration > 0.5


def test_upstream_output_is_piper_itself(piper_upstream, cache: Cache, piper) -> None:
    """At zero noise the upstream's take equals the embedded Piper engine's, sample for sample."""
    upstream = CachedEngine(load_upstream(f"piper-http={piper_upstream.url}"), cache)
    text = "Mind the gap."
    via_http = upstream.synthesize(SynthesisRequest(text, params=QUIET)).audio
    direct = Audio.join(list(piper.render(CachedEngine(piper, cache).resolve(
        SynthesisRequest(text, params=QUIET)))))
    assert via_http.pcm == direct.pcm


def test_engine_describes_the_upstream(piper_upstream) -> None:
    engine = load_upstream(f"piper-http={piper_upstream.url}", revision="joe-2026")
    assert engine.id == "piper-http"
    assert piper_upstream.url in engine.model_revision
    assert "voice=en_US-joe-medium" in engine.model_revision
    assert engine.model_revision.endswith("rev=joe-2026")
    assert engine.params["noise_scale"].default == pytest.approx(0.667)
    assert engine.voices == {"en_US-joe-medium": "en_US-joe-medium"}
    assert engine.languages == ("en-us",)


def test_seed_is_refused_not_ignored(piper_upstream, cache: Cache) -> None:
    cached = CachedEngine(load_upstream(f"piper-http={piper_upstream.url}"), cache)
    before = piper_upstream.syntheses()
    with pytest.raises(UnsupportedFeature, match="seed"):
        cached.synthesize(SynthesisRequest("Seeded.", seed=7))
    assert piper_upstream.syntheses() == before


def test_upstream_down_fails_misses_while_hits_keep_working(tmp_path, cache: Cache) -> None:
    with piper_http_server(tmp_path) as upstream:
        engine = load_upstream(f"piper-http={upstream.url}", retries=1)
        cached = CachedEngine(engine, cache)
        app = gateway_app(cached)
        with serve_app(app) as gateway:
            query = {"text": "Doors closing.", "text_lang": "en"}
            warm = httpx.get(f"{gateway}/tts", params=query, timeout=60)
            assert warm.status_code == 200 and warm.headers["X-Cache"] == "MISS"
            upstream.stop()

            hit = httpx.get(f"{gateway}/tts", params=query, timeout=60)
            miss = httpx.get(f"{gateway}/tts", params={**query, "text": "Doors opening."},
                             timeout=60)
            assert hit.status_code == 200 and hit.headers["X-Cache"] == "HIT"
            assert hit.content == warm.content
            assert miss.status_code == 502  # api_v2's shape for a failed render
            assert miss.json()["message"] == "tts failed"
            assert "unreachable" in miss.json()["Exception"]
            with pytest.raises(UpstreamError) as caught:
                cached.synthesize(SynthesisRequest("Doors opening."))
            assert caught.value.upstream_status is None
