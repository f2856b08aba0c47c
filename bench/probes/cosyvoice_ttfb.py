"""Time to first byte of a CosyVoice miss: straight from the server, and through the gateway.

CosyVoice's server streams int16 PCM as its model yields it, so a client starts
playing after the first model step, not after the whole take. A gateway that
buffered the take would cost the client the whole render on every miss; this
measures what streaming through voxcache costs instead. The upstream is a stand-in
speaking server.py's protocol (no GPU here) whose model takes ``--first`` seconds
to its first chunk and ``--gap`` seconds for each next one; every gateway request
is a new key (a miss), interleaved with a direct request so both see the same noise.

    python -m bench.probes.cosyvoice_ttfb [--requests 30] [--first 0.1] [--gap 0.2] [--chunks 4]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

import httpx
import numpy as np
from fastapi import FastAPI, Form
from fastapi.responses import StreamingResponse

from voxcache import Cache, CachedEngine
from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions
from voxcache.testing.servers import serve_in_thread
from voxcache.upstream import load_upstream

from ..helpers.core import Stats

RATE = 24000
CHUNK_SECONDS = 0.25


def standin(first: float, gap: float, chunks: int) -> FastAPI:
    """``/inference_sft`` answering like server.py: a StreamingResponse of PCM chunks."""
    app = FastAPI()

    async def speak() -> AsyncIterator[bytes]:
        t = np.arange(int(RATE * CHUNK_SECONDS)) / RATE
        chunk = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2").tobytes()
        for number in range(chunks):
            await asyncio.sleep(first if number == 0 else gap)
            yield chunk

    @app.post("/inference_sft")
    async def sft(tts_text: Annotated[str, Form()],
                  spk_id: Annotated[str, Form()]) -> StreamingResponse:
        return StreamingResponse(speak())

    return app


def first_byte(client: httpx.Client, url: str, text: str) -> tuple[float, float, str]:
    """(seconds to the first body byte, seconds to the last, X-Cache) of one request."""
    started = time.perf_counter()
    ttfb = None
    with client.stream("POST", f"{url}/inference_sft",
                       data={"tts_text": text, "spk_id": "中文女"}) as response:
        response.raise_for_status()
        for piece in response.iter_raw():
            if piece and ttfb is None:
                ttfb = time.perf_counter() - started
    assert ttfb is not None, "no audio"
    return ttfb, time.perf_counter() - started, response.headers.get("x-cache", "-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--first", type=float, default=0.1)
    parser.add_argument("--gap", type=float, default=0.2)
    parser.add_argument("--chunks", type=int, default=4)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, float]]] = {"direct": [], "gateway miss": [],
                                                   "gateway hit": []}
    with tempfile.TemporaryDirectory() as folder, \
            serve_in_thread(standin(args.first, args.gap, args.chunks)) as upstream:
        settings = Settings(cache_dir=Path(folder) / "cache")
        cache = Cache(settings.cache_dir, settings.cache_config())
        engine = load_upstream(f"cosyvoice={upstream}", revision="bench")
        app = create_app(settings, options=ServiceOptions(access_log=False),
                         cached=CachedEngine(engine, cache))
        with serve_in_thread(app) as gateway, httpx.Client(timeout=60) as client:
            for number in range(args.requests + 2):  # the first two warm the connections up
                text = f"Announcement number {number}."
                direct = first_byte(client, upstream, text)
                miss = first_byte(client, gateway, text)
                hit = first_byte(client, gateway, text)
                assert (miss[2], hit[2]) == ("MISS", "HIT"), (miss, hit)
                if number >= 2:
                    rows["direct"].append(direct[:2])
                    rows["gateway miss"].append(miss[:2])
                    rows["gateway hit"].append(hit[:2])
        cache.close()
    render = args.first + args.gap * (args.chunks - 1)
    print(f"CosyVoice stand-in: first chunk after {args.first:g} s, then {args.chunks - 1} "
          f"more {args.gap:g} s apart (whole take {render:g} s); {args.requests} requests each")
    print(f"{'':14}{'first byte median':>19}{'p99':>11}{'last byte median':>19}{'p99':>11}")
    for name, samples in rows.items():
        ttfb, total = Stats.of(s[0] for s in samples), Stats.of(s[1] for s in samples)
        print(f"{name:14}{ttfb.median * 1000:16.1f} ms{ttfb.p99 * 1000:8.1f} ms"
              f"{total.median * 1000:16.1f} ms{total.p99 * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
