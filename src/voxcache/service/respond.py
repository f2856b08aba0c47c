"""Turning a take into an HTTP response: whole bodies, progressive audio, and SSE.

Every audio response says how it was served (``X-Cache``, ``X-Cache-Tier``,
``X-Cache-Key``, ``ETag``). A whole body has its ``Content-Length``; a wav take
is the stored file itself (no re-encode), other formats are encoded in the I/O
pool once and stored as ``encoded`` entries (``voxcache.encoded``: memory and
disk, evicted before the PCM they derive from), so a repeated mp3 hit costs what
a wav hit does. A streamed take waits for its first chunk before
sending headers, so a failure before any audio still gets its proper 4xx/5xx.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator

from fastapi import Response
from fastapi.responses import StreamingResponse

from ..audio import Audio
from ..encoded import PASSTHROUGH, encoded_key
from ..encoded import encoded as encode_cached
from ..entry import Entry
from ..formats import Format, encode, media_type, wav_header
from .serving import Server, Take

STREAMABLE = ("pcm", "wav")
"""Formats whose chunks concatenate into one valid stream."""


def cache_headers(take: Take, fmt: Format) -> dict[str, str]:
    """The headers that say how a take was served."""
    etag = take.key if fmt.name == "wav" else f"{take.key}.{fmt.name}"
    headers = {"X-Cache": take.cache, "X-Cache-Tier": take.tier, "X-Cache-Key": take.key,
               "ETag": f'"{etag}"', "Cache-Control": "no-cache" if take.cache == "BYPASS"
               else "private, max-age=0"}
    if take.segments is not None:
        headers["X-Cache-Segments-Hit"], headers["X-Cache-Segments-Rendered"] = map(
            str, take.segments)
    return headers


async def whole(server: Server, take: Take, fmt: Format, started: float) -> Response:
    """The take as one body with Content-Length."""
    assert take.entry is not None
    body = await encoded(server, take.entry, fmt)
    server.metrics.first_audio(take.cache, time.perf_counter() - started)
    return Response(body, media_type=media_type(fmt, take.sample_rate),
                    headers=cache_headers(take, fmt))


async def encoded(server: Server, entry: Entry, fmt: Format) -> bytes:
    """The entry in ``fmt``: the stored bytes for wav/pcm, else a cached ``encoded`` entry
    (memory and disk; encoded in the I/O pool the first time)."""
    if fmt.name in PASSTHROUGH:
        return entry.blob if fmt.name == "wav" else bytes(entry.payload)
    found = server.cache.memory.get(encoded_key(entry.header.key, fmt.name), "encoded")
    if found is not None:
        return bytes(found.payload)
    return await server.admission.read(encode_cached, server.cache, entry, fmt)


async def streamed(server: Server, take: Take, fmt: Format, started: float,
                   sse: bool) -> Response:
    """The take as it is rendered: progressive audio, or SSE ``speech.audio.*`` events."""
    chunks = take.chunks(server.timeout)
    first = await anext(chunks)  # failures before any audio become proper errors
    server.metrics.first_audio(take.cache, time.perf_counter() - started)
    headers = cache_headers(take, fmt)
    if sse:
        return StreamingResponse(_sse(server, first, chunks, fmt), headers=headers,
                                 media_type="text/event-stream")
    return StreamingResponse(_progressive(first, chunks, fmt),
                             media_type=media_type(fmt, take.sample_rate), headers=headers)


async def _progressive(first: Audio, rest: AsyncIterator[Audio], fmt: Format
                       ) -> AsyncIterator[bytes]:
    if fmt.name == "wav":
        yield wav_header(first.sample_rate, first.channels, None)
    yield first.pcm
    async for chunk in rest:
        yield chunk.pcm


async def _sse(server: Server, first: Audio, rest: AsyncIterator[Audio], fmt: Format
               ) -> AsyncIterator[bytes]:
    """One ``speech.audio.delta`` per chunk (pcm: raw samples; other formats: a whole file
    per chunk), then ``speech.audio.done``."""
    frames = 0

    async def delta(chunk: Audio) -> bytes:
        nonlocal frames
        frames += chunk.frames
        data = chunk.pcm if fmt.name == "pcm" else await server.admission.read(encode, chunk,
                                                                                  fmt)
        event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
        return f"data: {json.dumps(event)}\n\n".encode()

    yield await delta(first)
    async for chunk in rest:
        yield await delta(chunk)
    done = {"type": "speech.audio.done",
            "usage": {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0},
            "audio_frames": frames}
    yield f"data: {json.dumps(done)}\n\n".encode()
