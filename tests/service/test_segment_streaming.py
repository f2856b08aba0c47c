"""Segment mode over HTTP: PARTIAL with counts, and cached leading sentences stream at once."""

from __future__ import annotations

import httpx

from voxcache.engines.tone import ToneEngine


def speech(url: str, text: str, **extra: object) -> httpx.Response:
    return httpx.post(f"{url}/v1/audio/speech", timeout=30, json={
        "model": "tts-1", "input": text, "response_format": "wav", **extra})



def test_partial_request_says_so_with_counts(make_app, live) -> None:
    app, cached = make_app(segments=True)
    with live(app) as server:
        speech(server.url, "Welcome to the store. Today's special is pork.")
        partial = speech(server.url, "Welcome to the store. Please scan the code.")
        whole_hit = speech(server.url, "Welcome to the store. Please scan the code.")
    assert partial.headers["x-cache"] == "PARTIAL"
    assert (partial.headers["x-cache-segments-hit"],
            partial.headers["x-cache-segments-rendered"]) == ("1", "1")
    assert whole_hit.headers["x-cache"] == "HIT"
    assert cached.engine.calls[-1] == "Please scan the code."  # only the new sentence rendered


def test_cached_first_sentence_streams_before_the_render_finishes(make_app, live,
                                                                 gated_tone) -> None:
    engine = gated_tone
    app, cached = make_app(engine=engine, segments=True)
    with live(app) as server:
        stored = speech(server.url, "Doors closing.", response_format="pcm").content
        engine.gate.clear()  # from now on every render waits
        body = {"model": "tts-1", "input": "Doors closing. Stand clear of the doors.",
                "response_format": "pcm"}
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body,
                          timeout=httpx.Timeout(10, read=5)) as response:
            assert response.headers["x-cache"] == "PARTIAL"
            chunks = response.iter_raw()
            first = next(chunks)  # arrives while the engine is still held shut
            assert len(engine.calls) == 1  # the second sentence has not been rendered yet
            engine.gate.set()
            rest = b"".join(chunks)
    # the cached sentence, then the new one: the pcm is resampled to 24 kHz by one filter
    # across the join, so what went out before the render began is the stored sentence's
    # beginning, and only samples within the filter's reach of the join are new
    assert len(first) > 0 and stored.startswith(first)
    assert len(first + rest) > len(stored)
    assert engine.calls[-1] == "Stand clear of the doors."


def test_model_upgrade_serves_stale_then_the_new_take(tmp_path, live) -> None:
    from voxcache import Cache, CachedEngine
    from voxcache.config import Settings
    from voxcache.service import create_app
    from voxcache.service.options import ServiceOptions

    settings = Settings(cache_dir=tmp_path / "cache", engine="tone")
    answers = []
    for revision in ("model-1", "model-2"):
        cached = CachedEngine(ToneEngine(model_revision=revision), Cache(settings.cache_dir),
                              model_policy="stale-while-revalidate")
        with live(create_app(settings, options=ServiceOptions(), cached=cached)) as server:
            answers.append(speech(server.url, "Platform two."))
            if revision == "model-2":
                assert cached.revalidator.wait_idle(30)
                answers.append(speech(server.url, "Platform two."))
        cached.cache.close()
    assert [a.headers["x-cache"] for a in answers] == ["MISS", "STALE", "HIT"]
    assert answers[1].content == answers[0].content  # the old take, knowingly
    assert answers[2].content != answers[0].content  # the new model's take
