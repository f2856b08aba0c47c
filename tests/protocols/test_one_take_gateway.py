"""One key, one take through the gateway, in front of a real Piper HTTP server.

Piper's own server at its default noise renders every request differently, so two
gateway processes that both render a key (the second gave up waiting for the first's
lock) make two takes. Whichever was published first is what both serve from then on,
from memory too; and every caller of a burst on one gateway hears one take.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.upstream import load_upstream

pytestmark = pytest.mark.piper


def test_two_gateways_that_both_rendered_serve_the_first_published_take(
        piper_upstream, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    patient = CachedEngine(load_upstream(f"piper-http={piper_upstream.url}"), Cache(folder))
    hasty = CachedEngine(load_upstream(f"piper-http={piper_upstream.url}"), Cache(folder),
                         lock_wait=0.01)  # gives up on the other's lock: renders too
    request = SynthesisRequest("Both gateways render this sentence at the same moment.")
    before = piper_upstream.syntheses()
    results = {}
    start = threading.Barrier(2)

    def ask(name: str, cached: CachedEngine) -> None:
        start.wait()
        results[name] = cached.synthesize(request)

    threads = [threading.Thread(target=ask, args=item) for item in
               (("patient", patient), ("hasty", hasty))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    try:
        renders = piper_upstream.syntheses() - before
        stored = patient.cache.folder.get(results["patient"].key)
        assert stored is not None
        served = [cached.synthesize(request) for cached in (patient, hasty, patient, hasty)]
        assert [r.tier for r in served] == ["memory"] * 4
        assert {r.audio.pcm for r in served} == {stored.audio().pcm}, (
            f"{renders} renders; the gateways serve different takes")
        # the callers that asked: each heard the published take (a non-streaming caller of a
        # duplicate render is handed the winner)
        assert {r.audio.pcm for r in results.values()} == {stored.audio().pcm}
    finally:
        patient.cache.close()
        hasty.cache.close()


def test_a_burst_on_one_gateway_hears_one_take_rendered_once(piper_upstream,
                                                             tmp_path: Path) -> None:
    cached = CachedEngine(load_upstream(f"piper-http={piper_upstream.url}"),
                          Cache(tmp_path / "cache"))
    request = SynthesisRequest("Every caller of this burst hears one take.")
    before = piper_upstream.syntheses()
    heard: list[bytes] = []
    lock = threading.Lock()

    def thread_caller(streamed: bool) -> None:
        got = (b"".join(c.pcm for c in cached.stream(request)) if streamed
               else cached.synthesize(request).audio.pcm)
        with lock:
            heard.append(got)

    async def loop_callers() -> list[bytes]:
        async def streamed() -> bytes:
            take = await cached.take(request, stream=True, timeout=60)
            return b"".join([chunk.pcm async for chunk in take.chunks(60)])

        whole = [await_result(cached.take(request, timeout=60)) for _ in range(3)]
        return list(await asyncio.gather(*whole, *(streamed() for _ in range(3))))

    async def await_result(pending) -> bytes:
        return (await pending).result.audio.pcm

    threads = [threading.Thread(target=thread_caller, args=(n % 2 == 1,)) for n in range(6)]
    for thread in threads:
        thread.start()
    heard.extend(asyncio.run(loop_callers()))
    for thread in threads:
        thread.join(120)
    try:
        stored = cached.cache.folder.get(cached.key_of(cached.resolve(request)))
        assert stored is not None and len(heard) == 12
        assert {pcm for pcm in heard} == {stored.audio().pcm}
        piper_upstream.wait_for_syntheses(before + 1)
    finally:
        cached.cache.close()
