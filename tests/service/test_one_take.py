"""One key, one take: every path that makes or serves a key hands out the one stored take.

The invariant as a matrix. Engines: the tone engine, Piper (at its default noise, so
every render differs), a stand-in with a pause between sentences (``segment_gap``), and
a stand-in whose every render differs. Paths: the library whole, ``stream()`` and
asyncio; HTTP wav, pcm and mp3, whole and streamed, and SSE; segments on and off;
joined callers; hits from memory, disk, Redis and S3. After publication, the decoded
PCM of every answer equals the take the tiers hold.

And for engines that render the same input the same way (tone, the gap engine, Piper
at zero noise) a miss made through any path is the same PCM: a whole render, a stream,
and a stitch of stored sentences all follow the engine's join rule. (The reported
fault: with ``segment_gap`` > 0 the stitch had the pauses and every other path had
none; the first pcm answer and the second differed by 0.35 s per sentence.)
"""

from __future__ import annotations

import asyncio
import base64
import io
import itertools
import json
import threading
import time
import uuid
import wave
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from voxcache.audio import Audio
from voxcache.cache import Cache, CacheConfig
from voxcache.cached import CachedEngine
from voxcache.config import Settings
from voxcache.encoded import encoded
from voxcache.engines.tone import ToneEngine
from voxcache.request import SynthesisRequest as R
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions
from voxcache.testing.servers import MotoS3Server, RedisServer, redis_available

TEXT = "The doors are closing now. Please stand clear of the doors! Mind the gap?"
GAP = 0.35


class GapTone(ToneEngine):
    """A deterministic engine that pauses between sentences, as most neural engines do."""

    id = "gap-tone"
    segment_gap = GAP


class Differing(ToneEngine):
    """An engine whose every render of a sentence is another take (unseeded sampling)."""

    id = "differing"

    def __init__(self) -> None:
        super().__init__()
        self._renders = itertools.count()

    def render(self, request):
        take = next(self._renders)
        for chunk in super().render(request):
            noise = np.random.default_rng(take).integers(-300, 300, len(chunk.pcm) // 2)
            samples = np.frombuffer(chunk.pcm, "<i2").astype(np.int32) + noise
            yield Audio(np.clip(samples, -32768, 32767).astype("<i2").tobytes(),
                        chunk.sample_rate)


def _engine(name: str, piper: Callable[[], Any]) -> Any:
    return {"tone": ToneEngine, "gap": GapTone, "differing": Differing}.get(name, piper)()


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[RedisServer, MotoS3Server]]:
    if not redis_available():
        pytest.skip("needs redis-server (Debian package redis-server)")
    with RedisServer(Path(f"/tmp/vx-one-take-{uuid.uuid4().hex[:8]}")) as redis, \
            MotoS3Server() as s3:
        yield redis, s3


@pytest.fixture
def shared_tiers(shared: tuple[RedisServer, MotoS3Server], monkeypatch: pytest.MonkeyPatch
                 ) -> tuple[str, str, MotoS3Server]:
    redis, s3 = shared
    for name, value in s3.env.items():
        monkeypatch.setenv(name, value)
    bucket = f"one-take-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    return f"{redis.url}?prefix=t{uuid.uuid4().hex[:8]}:", f"s3://{bucket}/p", s3


def _wav_pcm(data: bytes) -> bytes:
    with wave.open(io.BytesIO(data)) as wav:
        return wav.readframes(wav.getnframes())


def _streamed_wav_pcm(data: bytes) -> bytes:
    assert data[:4] == b"RIFF" and data[36:40] == b"data"  # the 44-byte streaming header
    return data[44:]


def _sse_audio(body: bytes) -> bytes:
    deltas = [json.loads(line[6:]) for line in body.decode().splitlines()
              if line.startswith("data: ")]
    return b"".join(base64.b64decode(d["audio"]) for d in deltas
                    if d["type"] == "speech.audio.delta")


async def _streamed_take(cached: CachedEngine, request: R) -> bytes:
    take = await cached.take(request, stream=True, timeout=60)
    return b"".join([chunk.pcm async for chunk in take.chunks(60)])


def _library_paths(cached: CachedEngine, request: R) -> dict[str, bytes]:
    """The take of ``request`` through every library path."""
    return {
        "synthesize": cached.synthesize(request).audio.pcm,
        "stream()": b"".join(chunk.pcm for chunk in cached.stream(request)),
        "asynthesize": asyncio.run(cached.asynthesize(request)).audio.pcm,
        "take(stream=True)": asyncio.run(_streamed_take(cached, request)),
    }


def _http_paths(url: str, text: str) -> dict[str, bytes]:
    """The take of ``text`` through every HTTP route and format that carries its samples."""
    with httpx.Client(base_url=url, timeout=60) as client:
        def speech(**fields: Any) -> httpx.Response:
            answer = client.post("/v1/audio/speech", json={"input": text, **fields})
            assert answer.status_code == 200, answer.text
            return answer

        def native(**fields: Any) -> httpx.Response:
            answer = client.post("/v1/synthesize", json={"text": text, **fields})
            assert answer.status_code == 200, answer.text
            return answer

        return {
            "wav": _wav_pcm(speech(response_format="wav").content),
            "native wav": _wav_pcm(native(response_format="wav").content),
            "native pcm, streamed": native(response_format="pcm", stream=True).content,
            "native wav, streamed": _streamed_wav_pcm(
                native(response_format="wav", stream=True).content),
            "sse wav": _sse_wav(speech(response_format="wav", stream_format="sse").content),
        }


def _sse_wav(body: bytes) -> bytes:
    audio = _sse_audio(body)
    return _wav_pcm(audio) if audio[4:8] != b"\xff\xff\xff\xff" else audio[44:]


def _burst(cached: list[CachedEngine], request: R, each: int) -> list[bytes]:
    """Callers asking at once, in threads and on an event loop, whole and streamed."""
    answers: list[bytes] = []
    lock = threading.Lock()
    start = threading.Barrier(len(cached) * each + 1)

    def thread_caller(engine: CachedEngine, streamed: bool) -> None:
        start.wait()
        got = (b"".join(c.pcm for c in engine.stream(request)) if streamed
               else engine.synthesize(request).audio.pcm)
        with lock:
            answers.append(got)

    def loop_callers() -> None:
        async def both() -> list[bytes]:
            start.wait()
            whole = cached[0].take(request, timeout=60)
            streamed = _streamed_take(cached[0], request)
            whole_take, streamed_pcm = await asyncio.gather(whole, streamed)
            assert whole_take.result is not None
            return [whole_take.result.audio.pcm, streamed_pcm]

        got = asyncio.run(both())
        with lock:
            answers.extend(got)

    threads = [threading.Thread(target=thread_caller, args=(engine, n % 2 == 1))
               for engine in cached for n in range(each)]
    threads.append(threading.Thread(target=loop_callers))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert len(answers) == len(cached) * each + 2
    return answers


def _landed(cached: CachedEngine) -> None:
    """Until no flight is open (a streamed answer ends before its take is published)."""
    deadline = time.monotonic() + 30
    while len(cached.flights):
        assert time.monotonic() < deadline, "a flight never landed"
        time.sleep(0.01)


def _published(cache: Cache, key: str) -> None:
    """Until the shared tiers hold ``key`` and nothing of it waits to be published."""
    deadline = time.monotonic() + 30
    while not all(cache.tiers.by_name(name).get(key) for name in ("redis", "s3")) or any(
            tier.get("write_queue", {}).get("busy", 0)
            for tier in cache.stats()["tiers"].values() if isinstance(tier, dict)):
        assert time.monotonic() < deadline, "publication never finished"
        time.sleep(0.01)


@pytest.mark.parametrize("engine_name", ["tone", "gap", "differing", "piper"])
def test_every_path_serves_the_one_stored_take(
        engine_name: str, tmp_path: Path, shared_tiers: tuple[str, str, MotoS3Server],
        request: pytest.FixtureRequest, live: Any) -> None:
    if engine_name == "piper":
        pytest.importorskip("piper")
    engine = _engine(engine_name, lambda: request.getfixturevalue("piper"))
    redis_url, s3_url, _ = shared_tiers
    tiers = ("memory", "disk", redis_url, s3_url)
    node = Cache(tmp_path / "node", CacheConfig(tiers=tiers))
    # one folder, two configurations (a node with segments on, a worker with them off)
    on = CachedEngine(engine, node, segments=True)
    off = CachedEngine(engine, node, segments=False)
    if engine_name != "piper":  # sentences stored first: the paragraph is a stitch of them
        for sentence in engine.split_sentences(TEXT):
            on.synthesize(R(sentence))
    try:
        request_ = R(TEXT)
        answers = _burst([on, off], request_, each=3)
        key = on.key_of(on.resolve(request_))
        _published(node, key)
        stored = node.folder.get(key)
        assert stored is not None
        take = stored.audio().pcm
        assert [a == take for a in answers] == [True] * len(answers), "a burst caller heard " \
            "another take than the one stored"
        for cached in (on, off):
            for path, pcm in _library_paths(cached, request_).items():
                assert pcm == take, f"{path} (segments {cached.segments}) served another take"
        for name, tier in (("redis", node.tiers.by_name("redis")),
                           ("s3", node.tiers.by_name("s3"))):
            held = tier.get(key)  # type: ignore[union-attr]
            assert held is not None and held.audio().pcm == take, f"{name} holds another take"
        settings = Settings(cache_dir=tmp_path / "node", engine="tone")
        app = create_app(settings, options=ServiceOptions(), cached=on)
        with live(app) as server:
            for path, pcm in _http_paths(server.url, TEXT).items():
                assert pcm == take, f"HTTP {path} served another take"
            with httpx.Client(base_url=server.url, timeout=60) as client:
                mp3 = [client.post("/v1/audio/speech", json={"input": TEXT,
                                   "response_format": "mp3"}).content for _ in range(2)]
            assert mp3[0] == mp3[1] == encoded(node, stored, "mp3")
        for tier_name, reader in (("disk", _disk_reader(tmp_path / "node", tiers)),
                                  ("redis", _shared_reader(tmp_path / "r", tiers)),
                                  ("s3", _shared_reader(tmp_path / "s", (*tiers[:2],
                                                        f"{tiers[2]}x", tiers[3])))):
            with reader as fresh:
                result = CachedEngine(engine, fresh, segments=True).synthesize(request_)
                assert (result.cache, result.tier) == ("hit", tier_name)
                assert result.audio.pcm == take, f"a hit from {tier_name} is another take"
    finally:
        node.close()


def _disk_reader(folder: Path, tiers: tuple[str, ...]) -> Any:
    """The same folder opened again (a restarted process: its memory is empty)."""
    return _closing(Cache(folder, CacheConfig(tiers=tiers[:2])))


def _shared_reader(folder: Path, tiers: tuple[str, ...]) -> Any:
    """Another node: its own folder, the shared tiers (a changed Redis prefix: S3 only)."""
    return _closing(Cache(folder, CacheConfig(tiers=tiers)))


class _closing:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def __enter__(self) -> Cache:
        return self.cache

    def __exit__(self, *exc: object) -> None:
        self.cache.close()


PATHS_OF_A_MISS = ["synthesize", "stream()", "take(stream=True)", "stitched",
                   "stitched, streamed", "native pcm, streamed", "sse wav", "bypass"]


@pytest.mark.parametrize("engine_name", ["tone", "gap", "piper at zero noise"])
def test_a_miss_is_the_same_take_whichever_path_made_it(
        engine_name: str, tmp_path: Path, request: pytest.FixtureRequest, live: Any) -> None:
    params: dict[str, float] = {}
    if engine_name.startswith("piper"):
        pytest.importorskip("piper")
        engine = request.getfixturevalue("piper")
        params = {"noise_scale": 0.0, "noise_w_scale": 0.0}
    else:
        engine = _engine(engine_name, lambda: None)
    made: dict[str, bytes] = {}
    for n, path in enumerate(PATHS_OF_A_MISS):  # a fresh folder each: every one is a miss
        cache = Cache(tmp_path / f"f{n}")
        cached = CachedEngine(engine, cache, segments=path.startswith("stitched"))
        request_ = R(TEXT, params=params)
        try:
            if path.startswith("stitched"):  # its sentences were asked alone before
                for sentence in engine.split_sentences(TEXT):
                    cached.synthesize(R(sentence, params=params))
            if path in ("synthesize", "stitched"):
                made[path] = cached.synthesize(request_).audio.pcm
            elif path == "stream()":
                made[path] = b"".join(c.pcm for c in cached.stream(request_))
            elif path in ("take(stream=True)", "stitched, streamed"):
                made[path] = asyncio.run(_streamed_take(cached, request_))
            elif path == "bypass":
                made[path] = cached.synthesize(request_, mode="bypass").audio.pcm
            else:
                settings = Settings(cache_dir=tmp_path / f"f{n}", engine="tone")
                app = create_app(settings, options=ServiceOptions(), cached=cached)
                with live(app) as server, httpx.Client(base_url=server.url,
                                                       timeout=60) as client:
                    if path == "native pcm, streamed":
                        made[path] = client.post("/v1/synthesize", json={
                            "text": TEXT, "params": params, "response_format": "pcm",
                            "stream": True}).content
                    else:
                        made[path] = _sse_wav(client.post("/v1/audio/speech", json={
                            "input": TEXT, "params": params, "response_format": "wav",
                            "stream_format": "sse"}).content)
            _landed(cached)
            stored = cache.folder.get(cached.key_of(cached.resolve(request_)))
            if path != "bypass":
                assert stored is not None and stored.audio().pcm == made[path], (
                    f"{path}: the answer is not the take it stored")
        finally:
            cache.close()
    reference = made["synthesize"]
    differ = {path: len(pcm) - len(reference) for path, pcm in made.items() if pcm != reference}
    assert differ == {}, f"paths disagree with a whole render (bytes longer or shorter): {differ}"
    if engine_name == "gap":  # the pauses are there, on every path
        sentences = len(engine.split_sentences(TEXT))
        silence = b"\0\0" * round(GAP * engine.sample_rate)
        assert reference.count(silence) >= sentences - 1
