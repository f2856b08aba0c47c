"""One render per key under a stampede, across threads and --workers processes; hits keep
flowing while renders saturate the engine."""

from __future__ import annotations

import asyncio
import io
import statistics
import threading
import time

import httpx
import pytest
import soundfile

STAMPEDE = 32


async def _stampede(url: str, body: dict, route: str = "/v1/audio/speech") -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=STAMPEDE)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        return await asyncio.gather(*(c.post(route, json=body) for _ in range(STAMPEDE)))


def _samples(response: httpx.Response) -> bytes:
    """The take's samples (a WAV's envelope records when that copy was written)."""
    if not response.content.startswith(b"RIFF"):
        return response.content
    return soundfile.read(io.BytesIO(response.content), dtype="int16")[0].tobytes()


def _statuses(responses: list[httpx.Response]) -> list[str]:
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses[:3]]
    assert len({_samples(r) for r in responses}) == 1, "every caller must get the same take"
    return [r.headers["x-cache"] for r in responses]


def test_32_concurrent_identical_requests_render_once(tone_server) -> None:
    live, cached = tone_server
    body = {"input": "Stampede. Of identical requests.", "voice": "alloy",
            "response_format": "wav", "params": {"delay": 0.3}}
    statuses = _statuses(asyncio.run(_stampede(live.url, body)))
    assert len(cached.engine.calls) == 1
    assert statuses.count("MISS") == 1
    assert set(statuses) <= {"MISS", "JOINED", "HIT"}
    assert statuses.count("JOINED") > 0


def test_streamed_joiners_get_the_whole_take(tone_server) -> None:
    """Late joiners of a streamed miss get what exists so far, then the rest live."""
    live, cached = tone_server
    body = {"input": "One. Two. Three. Four.", "response_format": "pcm",
            "params": {"delay": 0.2}}
    responses = asyncio.run(_stampede(live.url, body))
    statuses = _statuses(responses)
    assert statuses.count("MISS") == 1 and len(cached.engine.calls) == 1


@pytest.mark.piper
def test_32_concurrent_requests_render_once_with_piper(make_app, live, piper) -> None:
    app, cached = make_app(engine=piper)
    body = {"model": "piper", "input": "Please mind the gap between the train and the platform.",
            "voice": "joe", "response_format": "wav"}
    with live(app) as server:
        statuses = _statuses(asyncio.run(_stampede(server.url, body)))
    assert statuses.count("MISS") == 1
    assert cached.cache.session_counts().get("syntheses") == 1


@pytest.mark.slow
def test_32_concurrent_requests_across_two_workers(tmp_path, serve_proc) -> None:
    body = {"text": "Across processes. One render.", "params": {"delay": 0.5},
            "response_format": "wav"}
    with serve_proc(tmp_path / "cache", "--workers", "2") as (url, _proc):
        statuses = _statuses(asyncio.run(_stampede(url, body, "/v1/synthesize")))
        time.sleep(2.5)  # each worker flushes its persisted counters every 2 s
        counters = httpx.get(f"{url}/v1/stats", timeout=10).json()["counters"]
    assert statuses.count("MISS") == 1
    assert counters["syntheses"] == 1


@pytest.mark.piper
def test_hits_are_served_while_renders_saturate_the_engine(make_app, live, piper) -> None:
    app, _ = make_app(engine=piper, render_concurrency=1, render_queue=8)
    hot = {"input": "Thank you for calling.", "response_format": "wav"}
    long_text = " ".join(f"This is sentence number {i} of a long announcement." for i in range(6))
    with live(app) as server, httpx.Client(base_url=server.url, timeout=120) as c:
        assert c.post("/v1/audio/speech", json=hot).headers["x-cache"] == "MISS"

        def hit_latencies(n: int) -> list[float]:
            out = []
            for _ in range(n):
                t = time.perf_counter()
                r = c.post("/v1/audio/speech", json=hot)
                out.append(time.perf_counter() - t)
                assert r.status_code == 200 and r.headers["x-cache"] == "HIT"
            return out

        idle = hit_latencies(30)
        loaders = [threading.Thread(target=httpx.post, args=(f"{server.url}/v1/audio/speech",),
                                    kwargs={"json": {"input": f"{long_text} Take {i}.",
                                                     "response_format": "wav"},
                                            "timeout": 120}) for i in range(3)]
        for t in loaders:
            t.start()
        deadline = time.monotonic() + 30
        while app.state.server.admission.running == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert app.state.server.admission.running == 1
        loaded = hit_latencies(30)
        still_rendering = app.state.server.admission.running
        for t in loaders:
            t.join()
    ratio = statistics.median(loaded) / statistics.median(idle)
    print(f"\nhit latency median idle {statistics.median(idle) * 1000:.2f} ms, under load "
          f"{statistics.median(loaded) * 1000:.2f} ms (ratio {ratio:.2f}); p-max idle "
          f"{max(idle) * 1000:.2f} ms, loaded {max(loaded) * 1000:.2f} ms; renders still "
          f"running at the end: {still_rendering}")


def test_segment_mode_stampede_renders_once_and_hits_skip_the_render_slots(make_app,
                                                                           live) -> None:
    """With segment mode on, misses go through CachedEngine's segment path — still once."""
    app, cached = make_app(segments=True, render_queue=2)
    body = {"input": "Segment one. Segment two.", "params": {"delay": 0.3},
            "response_format": "wav"}
    with live(app) as server:
        statuses = _statuses(asyncio.run(_stampede(server.url, body)))
        again = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=30)
    assert statuses.count("MISS") == 1 and statuses.count("JOINED") == STAMPEDE - 1
    assert len(cached.engine.calls) == 1  # both sentences in one engine call
    assert again.headers["x-cache"] == "HIT" and again.headers["x-cache-tier"] == "memory"


def test_segment_mode_still_streams_a_miss_sentence_by_sentence(make_app, live) -> None:
    app, cached = make_app(segments=True)
    body = {"input": "Stream one. Stream two. Stream three.", "params": {"delay": 0.2},
            "response_format": "pcm", "stream_format": "sse"}
    with live(app) as server, httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body,
                                           timeout=30) as r:
        assert r.headers["x-cache"] == "MISS"
        deltas = [line for line in r.iter_lines() if "speech.audio.delta" in line]
    # one delta per sentence, then the 24 kHz resampler's tail (OpenAI's pcm rate)
    assert len(deltas) == 4 and len(cached.engine.calls) == 1


def test_segment_mode_stitching_stored_sentences_does_not_wait_for_a_render_slot(make_app,
                                                                                 live) -> None:
    app, cached = make_app(segments=True, render_concurrency=1, render_queue=0)
    with live(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
        for sentence in ("Alpha one.", "Beta two."):
            assert c.post("/v1/audio/speech", json={"input": sentence}).status_code == 200
        slow = threading.Thread(target=httpx.post, args=(f"{server.url}/v1/audio/speech",),
                                kwargs={"json": {"input": "Slow.", "params": {"delay": 2}},
                                        "timeout": 30})
        slow.start()
        deadline = time.monotonic() + 10
        while app.state.server.admission.running == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stitched = c.post("/v1/audio/speech", json={"input": "Alpha one. Beta two.",
                                                    "response_format": "wav"})
        slow.join()
    assert stitched.status_code == 200, stitched.text
    assert (stitched.headers["x-cache"], stitched.headers["x-cache-tier"]) == ("HIT", "segments")
    assert len(cached.engine.calls) == 3
