"""Stored entries over HTTP, cache modes, overload, and metrics."""

from __future__ import annotations

import io
import threading
import time

import httpx
import openai
import pytest
import soundfile
from fastapi.testclient import TestClient


def test_stored_entry_is_immutable_with_etag_and_range(make_app) -> None:
    app, _ = make_app()
    c = TestClient(app)
    r = c.post("/v1/audio/speech", json={"input": "Range me.", "response_format": "wav"})
    key = r.headers["x-cache-key"]
    full = c.get(f"/v1/audio/{key}")
    # the stored file keeps its envelope chunk; /v1/audio/speech delivered the same samples
    # behind a plain 44-byte header
    assert full.status_code == 200 and full.content.endswith(r.content[44:])
    assert full.headers["x-voxcache-envelope"] == "vxch" and b"vxch" not in r.content
    assert "immutable" in full.headers["cache-control"]
    assert full.headers["etag"] == f'"{key}"'
    assert int(full.headers["content-length"]) == len(full.content)
    part = c.get(f"/v1/audio/{key}", headers={"Range": "bytes=4-11"})
    assert part.status_code == 206 and part.content == full.content[4:12]
    assert c.get(f"/v1/audio/{key}", headers={"If-None-Match": f'"{key}"'}).status_code == 304
    assert soundfile.read(io.BytesIO(full.content))[1] == 16000  # players skip the vxch chunk


def test_bypass_and_refresh(make_app) -> None:
    app, cached = make_app()
    c = TestClient(app)
    body = {"input": "Mode test.", "response_format": "wav"}
    assert c.post("/v1/audio/speech", json=body).headers["x-cache"] == "MISS"
    bypass = c.post("/v1/audio/speech", json={**body, "cache": "bypass"})
    assert bypass.headers["x-cache"] == "BYPASS"
    assert c.post("/v1/audio/speech", json=body).headers["x-cache"] == "HIT"
    refresh = c.post("/v1/audio/speech", json={**body, "cache": "refresh"})
    assert refresh.headers["x-cache"] == "MISS"
    assert c.post("/v1/audio/speech", json=body).headers["x-cache"] == "HIT"
    header = c.post("/v1/audio/speech", json=body, headers={"X-Cache-Mode": "bypass"})
    assert header.headers["x-cache"] == "BYPASS"
    assert c.post("/v1/audio/speech", json=body,
                  headers={"X-Cache-Mode": "sometimes"}).status_code == 400
    assert len(cached.engine.calls) == 4


def test_overload_is_503_with_retry_after_and_hits_still_served(make_app, live) -> None:
    app, _ = make_app(render_concurrency=1, render_queue=0)
    with live(app) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        hot = {"input": "Already here.", "response_format": "wav"}
        assert c.post("/v1/audio/speech", json=hot).headers["x-cache"] == "MISS"
        slow = threading.Thread(target=httpx.post, args=(f"{server.url}/v1/audio/speech",),
                                kwargs={"json": {"input": "Slow one.", "params": {"delay": 2}},
                                        "timeout": 60})
        slow.start()
        deadline = time.monotonic() + 10
        while app.state.server.admission.running == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        refused = c.post("/v1/audio/speech", json={"input": "No room for me."})
        hit = c.post("/v1/audio/speech", json=hot)
        slow.join()
    assert refused.status_code == 503 and int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"] == "overloaded_error"
    assert hit.status_code == 200 and hit.headers["x-cache"] == "HIT"


def test_metrics_exposes_the_promised_series(make_app) -> None:
    app, _ = make_app()
    c = TestClient(app)
    for _ in range(2):
        c.post("/v1/audio/speech", json={"input": "Count me.", "response_format": "wav"})
    c.post("/v1/audio/speech", json={"input": "hi", "voice": "nobody"})
    c.post("/v1/audio/speech", json={"input": ""})
    text = c.get("/metrics").text
    # an unknown voice is a 400 on the OpenAI route, as OpenAI answers it
    assert 'voxcache_requests_total{cache="ERROR",code="400",route="speech"} 2.0' in text
    for series in ('voxcache_requests_total{cache="HIT",code="200",route="speech"} 1.0',
                   'voxcache_requests_total{cache="MISS",code="200",route="speech"} 1.0',
                   'voxcache_hits_total{tier="memory"} 1.0',
                   'voxcache_renders_total{outcome="ok"} 1.0',
                   "voxcache_render_queue_depth 0.0", "voxcache_render_seconds_count 1.0",
                   "voxcache_render_seconds_saved_total", 'voxcache_stored_bytes{tier="disk"}',
                   'voxcache_cache_events_total{event="corruptions"} 0.0',
                   'voxcache_time_to_first_audio_seconds_count{cache="HIT"} 1.0'):
        assert series in text, series


@pytest.mark.piper
def test_piper_end_to_end_with_the_openai_client(make_app, live, piper) -> None:
    app, _ = make_app(engine=piper)
    with live(app) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
        text = "Good morning. Today's weather is sunny with a high of twenty-four degrees."
        timings = {}
        for round_ in ("miss", "hit"):
            started = time.perf_counter()
            with client.audio.speech.with_streaming_response.create(
                    model="tts-1", voice="alloy", input=text, response_format="pcm") as r:
                chunks = r.iter_bytes()
                first = next(chunks)
                timings[round_] = time.perf_counter() - started
                pcm = first + b"".join(chunks)
                assert r.headers["x-cache"] == {"miss": "MISS", "hit": "HIT"}[round_]
                assert "rate=24000" in r.headers["content-type"]  # OpenAI's pcm rate
            assert len(pcm) > 24000  # over half a second of speech
        wav = client.audio.speech.with_raw_response.create(
            model="piper", voice="en_US-joe-medium", input=text, response_format="wav")
        assert wav.headers["x-cache"] == "HIT"
        samples, rate = soundfile.read(io.BytesIO(wav.parse().content), dtype="int16")
        assert rate == 22050 and abs(len(pcm) // 2 - round(len(samples) * 24000 / 22050)) <= 1
    print(f"\nPiper time to first audio: miss {timings['miss'] * 1000:.0f} ms, "
          f"hit {timings['hit'] * 1000:.1f} ms")


def test_a_caller_that_times_out_does_not_cancel_the_shared_render(make_app, live) -> None:
    app, cached = make_app(request_timeout=0.3)
    body = {"input": "Slow. Very slow. Still going.", "params": {"delay": 0.3},
            "response_format": "wav"}
    with live(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        import concurrent.futures

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            first, second = pool.map(lambda _: c.post("/v1/audio/speech", json=body), range(2))
        assert {first.status_code, second.status_code} == {504}
        assert "timed out" in first.json()["error"]["message"]
        deadline = time.monotonic() + 10
        while app.state.server.admission.running or len(cached.flights):  # render goes on
            assert time.monotonic() < deadline
            time.sleep(0.05)
        again = c.post("/v1/audio/speech", json=body)
        metrics = c.get("/metrics").text
    assert again.status_code == 200 and again.headers["x-cache"] == "HIT"
    assert len(cached.engine.calls) == 1
    assert 'voxcache_renders_total{outcome="ok"} 1.0' in metrics  # the leader was not cancelled
    assert 'outcome="failed"' not in metrics


def test_served_requests_feed_the_usage_analytics(make_app) -> None:
    """Hits and misses through the service are what `warm --from-top-misses` ranks."""
    app, cached = make_app()
    c = TestClient(app)
    for _ in range(3):
        c.post("/v1/audio/speech", json={"input": "Asked three times.", "response_format": "wav"})
    top = cached.usage.top("asked", 5)
    assert [(row["text"], row["asked"], row["missed"]) for row in top] == [
        ("Asked three times.", 3, 1)]


def test_memory_hits_of_stored_entries_take_the_fast_path_with_the_same_answer(make_app) -> None:
    app, cached = make_app(api_keys={"key-a": "acme", "key-b": "globex"})
    c = TestClient(app)
    a, b = {"Authorization": "Bearer key-a"}, {"X-API-Key": "key-b"}
    key = c.post("/v1/audio/speech", json={"input": "Fast path."}, headers=a).headers[
        "x-cache-key"]
    cached.cache.in_process.clear()
    routed = c.get(f"/v1/audio/{key}", headers=a)  # a disk read: the full route
    fast = c.get(f"/v1/audio/{key}", headers=a)  # now in memory: the fast path
    assert (routed.headers["x-cache-tier"], fast.headers["x-cache-tier"]) == ("disk", "memory")
    assert fast.content == routed.content
    for name in ("etag", "cache-control", "content-type", "content-length", "accept-ranges",
                 "x-cache", "x-cache-key", "x-voxcache-envelope"):
        assert fast.headers[name] == routed.headers[name], name
    # Everything the fast path does not own falls through to the route, unchanged.
    assert c.get(f"/v1/audio/{key}", headers=b).status_code == 404  # another tenant
    assert c.get(f"/v1/audio/{key}").status_code == 401  # no key
    assert c.get(f"/v1/audio/{key}", headers={**a, "Range": "bytes=0-3"}).status_code == 206


def test_seed_policy_per_request_over_http(make_app) -> None:
    app, cached = make_app()
    c = TestClient(app)

    def ask(policy: str) -> str:
        r = c.post("/v1/synthesize", json={"text": "Variety, please.", "seed_policy": policy})
        assert r.status_code == 200, r.text
        return r.headers["x-cache"]

    assert [ask("bypass") for _ in range(3)] == ["BYPASS"] * 3
    assert len(cached.engine.calls) == 3
    [ask("variants:2") for _ in range(6)]
    assert len(cached.engine.calls) == 3 + 2  # two takes rendered, then served in rotation
    bad = c.post("/v1/synthesize", json={"text": "x", "seed_policy": "sometimes"})
    assert bad.status_code == 400 and "seed policy" in bad.json()["error"]["message"]
