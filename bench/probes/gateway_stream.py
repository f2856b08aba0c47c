"""Streamed misses through the gateway: time to first and last byte, against the server.

A voice agent in front of voxcache starts playing at the upstream's first chunk
only if the gateway passes chunks on as they come. The upstreams here are
stand-ins speaking the real protocols (no GPU on these machines) whose model
yields one chunk every ``--interval`` seconds, ``--chunks`` of them:

- GPT-SoVITS ``api_v2`` ``POST /tts`` with ``streaming_mode=2``: the zero-frame
  WAV header with the first chunk, then raw PCM (32 kHz);
- CosyVoice ``server.py`` ``POST /inference_sft``: raw int16 PCM (24 kHz);
- an OpenAI-compatible ``POST /v1/audio/speech`` with ``response_format=wav``: a WAV
  header with unknown sizes (as OpenAI streams WAV), then PCM (24 kHz); asked for wav and
  for mp3 (the official client's default) through the gateway.

Each round asks the server directly, then the gateway for the same text (a new
key every round, so every gateway request is a miss), one after the other so
both see the same machine; the first rounds warm connections up and are dropped.

    python -m bench.probes.gateway_stream [--requests 20] [--interval 1.0] [--chunks 3]
                                   [--kinds gpt-sovits,cosyvoice,openai]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import tempfile
import time
import wave
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
from fastapi import FastAPI, Form, Request
from fastapi.responses import JSONResponse, StreamingResponse

from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions
from voxcache.testing.servers import serve_in_thread

from ..helpers.core import Stats

WARMUP = 2
CHUNK_SECONDS = 0.5


def upstream_app(interval: float, chunks: int) -> FastAPI:
    """Both stand-ins on one app: ``/tts`` (+ ``/set_refer_audio``) and ``/inference_sft``."""
    app = FastAPI()

    async def speak(rate: int, header: bool, unknown: bool = False) -> AsyncIterator[bytes]:
        t = np.arange(int(rate * CHUNK_SECONDS)) / rate
        chunk = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2").tobytes()
        for number in range(chunks):
            await asyncio.sleep(interval)  # the model's step
            if header and number == 0:
                buffer = io.BytesIO()
                with wave.open(buffer, "wb") as out:  # api_v2's header for zero frames
                    out.setnchannels(1)
                    out.setsampwidth(2)
                    out.setframerate(rate)
                head = buffer.getvalue()
                if unknown:  # OpenAI's streamed WAV: sizes 0xFFFFFFFF
                    head = head[:4] + b"\xff" * 4 + head[8:40] + b"\xff" * 4
                yield head
            yield chunk

    @app.post("/tts")
    async def tts(request: Request) -> StreamingResponse:
        await request.json()
        return StreamingResponse(speak(32000, header=True), media_type="audio/wav")

    @app.get("/set_refer_audio")
    async def set_refer_audio() -> JSONResponse:
        return JSONResponse({"message": "success"})

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> StreamingResponse:
        await request.json()
        return StreamingResponse(speak(24000, header=True, unknown=True), media_type="audio/wav")

    @app.post("/inference_sft")
    async def sft(tts_text: Annotated[str, Form()],
                  spk_id: Annotated[str, Form()]) -> StreamingResponse:
        return StreamingResponse(speak(24000, header=False))

    return app


@contextlib.contextmanager
def gateway(upstream: str, kind: str, folder: Path) -> Iterator[str]:
    """``voxcache serve --upstream KIND=URL`` as an app on a live server."""
    settings = Settings(cache_dir=folder / f"cache-{kind}", upstream=f"{kind}={upstream}",
                        upstream_revision="bench", reference_roots=[folder / "refs"])
    app = create_app(settings, options=ServiceOptions(access_log=False))
    try:
        with serve_in_thread(app) as address:
            yield address
    finally:
        app.state.server.cache.close()


def timed(client: httpx.Client, url: str, kind: str, text: str,
          clip: Path) -> tuple[float, float, str]:
    """(seconds to the first body byte, to the last, X-Cache) of one streamed request."""
    if kind == "gpt-sovits":
        call = {"url": f"{url}/tts", "json": {
            "text": text, "text_lang": "en", "ref_audio_path": str(clip), "prompt_lang": "en",
            "streaming_mode": 2}}
    elif kind.startswith("openai"):
        call = {"url": f"{url}/v1/audio/speech", "json": {
            "model": "tts-1", "voice": "alloy", "input": text,
            "response_format": "mp3" if kind.endswith("mp3") else "wav"}}
    else:
        call = {"url": f"{url}/inference_sft", "data": {"tts_text": text, "spk_id": "中文女"}}
    started = time.perf_counter()
    first = None
    with client.stream("POST", **call) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: {response.status_code} {response.read()[:200]!r}")
        for piece in response.iter_raw():
            if piece and first is None:
                first = time.perf_counter() - started
    if first is None:
        raise RuntimeError(f"{url}: no audio")
    return first, time.perf_counter() - started, response.headers.get("x-cache", "-")


def measure(kind: str, upstream: str, folder: Path, clip: Path,
            requests: int) -> dict[str, list[tuple[float, float]]]:
    """Alternate direct and gateway requests for new texts; keep (first, last) seconds.
    ``openai-mp3``: the gateway is asked for mp3 (the upstream, as ever, for wav)."""
    rows: dict[str, list[tuple[float, float]]] = {"direct": [], "gateway miss": []}
    upstream_kind = kind.removesuffix("-mp3")
    with gateway(upstream, upstream_kind, folder) as address, \
            httpx.Client(timeout=120) as client:
        for number in range(requests + WARMUP):
            text = f"Announcement number {number} for {kind}."
            direct = timed(client, upstream, upstream_kind, text, clip)
            miss = timed(client, address, kind, text, clip)
            if miss[2] != "MISS":
                raise RuntimeError(f"expected a miss, got {miss[2]}")
            if number >= WARMUP:
                rows["direct"].append(direct[:2])
                rows["gateway miss"].append(miss[:2])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20, help="misses per upstream kind")
    parser.add_argument("--interval", type=float, default=1.0,
                        help="seconds between the model's chunks (the first comes after one)")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--kinds", default="gpt-sovits,cosyvoice,openai,openai-mp3")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as name, \
            serve_in_thread(upstream_app(args.interval, args.chunks)) as upstream:
        folder = Path(name)
        (folder / "refs").mkdir()
        clip = folder / "refs" / "ref.wav"
        t = np.arange(16000 * 4) / 16000
        clip.write_bytes(_wav((0.3 * np.sin(2 * np.pi * 220 * t) * 32767).astype("<i2"), 16000))
        for kind in args.kinds.split(","):
            results[kind] = measure(kind, upstream, folder, clip, args.requests)
    print(f"stand-in upstreams: {args.chunks} chunks of {CHUNK_SECONDS:g} s audio, one every "
          f"{args.interval:g} s (the last sent at {args.chunks * args.interval:g} s); "
          f"{args.requests} misses per kind, each a new key")
    print(f"{'':28}{'first byte median':>18}{'p99':>10}{'last byte median':>18}{'p99':>10}")
    for kind, rows in results.items():
        for path, samples in rows.items():
            first = Stats.of(s[0] for s in samples)
            last = Stats.of(s[1] for s in samples)
            print(f"{kind + ' ' + path:28}{first.median * 1000:15.0f} ms{first.p99 * 1000:7.0f} "
                  f"ms{last.median * 1000:15.0f} ms{last.p99 * 1000:7.0f} ms")


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return buffer.getvalue()


if __name__ == "__main__":
    main()
