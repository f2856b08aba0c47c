"""Turning a take into an HTTP response: whole bodies, progressive audio, and SSE.

Every audio response says how it was served (``X-Cache``, ``X-Cache-Tier``, ``X-Cache-Key``,
``ETag``) and is a standard file of the format asked for, never the stored envelope (a wav
hit goes out as a 44-byte header and the stored samples, copying nothing). Other formats are
encoded once in the I/O pool and stored (``voxcache.encoded``). A stream waits for its first
chunk before headers (so an early failure keeps its status) and resamples through one
stateful ``formats.Resampler``. docs/operating/service.md.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Sequence

from fastapi import Response
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from ..audio import SAMPLE_WIDTH, Audio
from ..encoded import encoded as encode_cached
from ..encoded import key_of, passthrough
from ..entry import Entry
from ..formats import WAV_HEADER_BYTES, Format, Resampler, encode, media_type, wav_header
from ..stream_encode import STREAMS, StreamEncoder
from ..vocabulary import Outcome
from .serving import Server, Take
from .speech_usage import usage

RAW_STREAMS = ("pcm", "wav")
"""Formats whose chunks concatenate into one valid stream as they are rendered."""
STREAMABLE = (*RAW_STREAMS, *STREAMS)
"""Formats a take can be sent in while it renders: raw samples, or mp3/opus as the
encoder makes its bytes final (``stream_encode``)."""

Part = bytes | memoryview


class AudioResponse(Response):
    """A whole body sent as the parts it is made of (a WAV header, then the stored samples
    as a view of the verified entry), so answering a hit never copies the take."""

    def __init__(self, parts: Sequence[Part], *, media_type: str,
                 headers: dict[str, str]) -> None:
        self.parts = [part for part in parts if len(part)] or [b""]
        length = sum(len(part) for part in self.parts)
        super().__init__(None, media_type=media_type,
                         headers={**headers, "Content-Length": str(length)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_parts(send, self.status_code, self.raw_headers, self.parts)


async def send_parts(send: Send, status: int, headers: list[tuple[bytes, bytes]],
                     parts: Sequence[Part]) -> None:
    """A whole body as the parts it is made of, one message each (nothing joined)."""
    await send({"type": "http.response.start", "status": status, "headers": headers})
    last = len(parts) - 1
    for index, part in enumerate(parts):
        await send({"type": "http.response.body", "body": part, "more_body": index < last})


def etag(key: str, fmt: Format, sample_rate: int) -> str:
    """The delivered representation's tag: never the bare key, which names the stored
    file (``GET /v1/audio/{key}``, envelope included); raw PCM names its rate."""
    if fmt.name == "pcm":
        return f'"{key}.pcm.{fmt.rate_for(sample_rate)}"'
    return f'"{key}.{fmt.name}"'


def cache_headers(take: Take, fmt: Format) -> dict[str, str]:
    """The headers that say how a take was served."""
    bypass = take.cache is Outcome.BYPASS
    headers = {"X-Cache": take.cache.header, "X-Cache-Tier": take.tier, "X-Cache-Key": take.key,
               "ETag": etag(take.key, fmt, take.sample_rate),
               "Cache-Control": "no-cache" if bypass else "private, max-age=0"}
    if take.segments is not None:
        headers["X-Cache-Segments-Hit"], headers["X-Cache-Segments-Rendered"] = map(
            str, take.segments)
    if take.reason:  # why it was not stored (a class name or a check, never the text)
        headers["X-Cache-Reason"] = take.reason
    return headers


async def whole(server: Server, take: Take, fmt: Format, started: float) -> Response:
    """The take as one body with Content-Length."""
    assert take.entry is not None
    stored = take.result is None or take.result.stored
    parts = await delivered(server, take.entry, fmt, stored)
    server.metrics.first_audio(take.cache.header, time.perf_counter() - started)
    return AudioResponse(parts, media_type=media_type(fmt, take.sample_rate),
                         headers=cache_headers(take, fmt))


async def delivered(server: Server, entry: Entry, fmt: Format,
                    stored: bool = True) -> tuple[Part, ...]:
    """The entry in ``fmt``, as parts to send in order: a plain WAV header and the stored
    samples, the stored samples alone (pcm at the take's rate), or a cached ``encoded``
    entry (memory and disk; encoded in the I/O pool the first time). A take that is not
    stored (refused by the storing gate, a bypass) is encoded and kept nowhere."""
    if not stored:
        header = entry.header
        if passthrough(fmt, header.sample_rate):
            return held_parts(server, entry, fmt) or ()
        return (await server.admission.read(encode, entry.audio(), fmt),)
    parts = held_parts(server, entry, fmt)
    if parts is not None:
        return parts
    return (await server.admission.read(encode_cached, server.cache, entry, fmt),)


def held_parts(server: Server, entry: Entry, fmt: Format) -> tuple[Part, ...] | None:
    """The entry in ``fmt`` when that needs no I/O (the stored samples, or an encoding the
    memory tier holds); None when it must be read or encoded."""
    header = entry.header
    if passthrough(fmt, header.sample_rate):
        if fmt.name == "pcm":
            return (entry.payload,)
        return wav_header(header.sample_rate, header.channels, header.length), entry.payload
    found = server.cache.in_process.get(key_of(header.key, fmt), "encoded")
    return None if found is None else (found.payload,)


def hit_headers(take: Take, fmt: Format, length: int) -> list[tuple[bytes, bytes]]:
    """The raw headers ``whole`` sends for ``take`` (a memory hit's answer, prebuilt once)."""
    headers = {**cache_headers(take, fmt), "Content-Length": str(length),
               "Content-Type": media_type(fmt, take.sample_rate)}
    return [(name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in headers.items()]


async def streamed(server: Server, take: Take, fmt: Format, started: float, sse: bool,
                   text: str = "") -> Response:
    """The take as it is rendered: progressive audio, or SSE ``speech.audio.*`` events
    (``text``: the input, for the ``usage`` of ``speech.audio.done``)."""
    chunks = take.chunks(server.timeout)
    first = await anext(chunks)  # failures before any audio become proper errors
    server.metrics.first_audio(take.cache.header, time.perf_counter() - started)
    headers = cache_headers(take, fmt)
    if sse:
        return StreamingResponse(_sse(server, take, fmt, first, chunks, text), headers=headers,
                                 media_type="text/event-stream")
    body = (_progressive(first, chunks, fmt) if fmt.name in RAW_STREAMS
            else _encoding(server, _prepend(first, chunks), fmt, first))
    return StreamingResponse(body, media_type=media_type(fmt, take.sample_rate),
                             headers=headers)


async def _progressive(first: Audio, rest: AsyncIterator[Audio], fmt: Format
                       ) -> AsyncIterator[bytes]:
    """Raw samples (resampled to the format's rate, one filter across every chunk); a wav
    gets one streaming header first (its lengths are unknown: 0xFFFFFFFF, as OpenAI
    streams WAV)."""
    rate = fmt.rate_for(first.sample_rate)
    resampler = Resampler(first.sample_rate, rate, first.channels)
    if fmt.name == "wav":
        yield wav_header(rate, first.channels, None)
    async for chunk in _prepend(first, rest):
        samples = resampler.push(chunk.pcm)
        if samples:
            yield samples
    tail = resampler.flush()
    if tail:
        yield tail


async def _sse(server: Server, take: Take, fmt: Format, first: Audio,
               rest: AsyncIterator[Audio], text: str) -> AsyncIterator[bytes]:
    """``speech.audio.delta`` events whose ``audio`` concatenates into one file of ``fmt``,
    then ``speech.audio.done`` with its ``usage`` (of the audio delivered).

    A stored take is its delivered file in one delta (a wav header with the real
    lengths). A take being rendered streams: pcm as resampled samples per chunk, wav as
    the streaming header then samples, mp3 and opus as the bytes the encoder has made
    final (``stream_encode``); flac cannot be cut while it is encoded (libsndfile
    rewrites its STREAMINFO when the file closes), so it comes as one delta once the
    render is whole.
    """
    block, rate = first.channels * SAMPLE_WIDTH, first.sample_rate
    if not take.streaming:
        assert take.entry is not None
        stored = take.result is None or take.result.stored
        yield _event(b"".join(await delivered(server, take.entry, fmt, stored)))
        frames, rate = take.entry.header.length // block, take.entry.header.sample_rate
    elif fmt.name in RAW_STREAMS:
        rate, sent = fmt.rate_for(first.sample_rate), 0
        async for data in _progressive(first, rest, fmt):
            sent += len(data)
            yield _event(data)
        frames = (sent - (WAV_HEADER_BYTES if fmt.name == "wav" else 0)) // block
    elif fmt.name in STREAMS:
        counted = [0]
        async for data in _encoding(server, _counting(_prepend(first, rest), counted), fmt,
                                    first):
            yield _event(data)
        frames = counted[0]
    else:
        audio = Audio.join([chunk async for chunk in _prepend(first, rest)])
        frames = audio.frames
        yield _event(await server.admission.read(encode, audio, fmt))
    done = {"type": "speech.audio.done", "usage": usage(text, frames, rate)}
    yield f"data: {json.dumps(done)}\n\n".encode()


async def _encoding(server: Server, chunks: AsyncIterator[Audio], fmt: Format, first: Audio
                    ) -> AsyncIterator[bytes]:
    """mp3 or opus bytes as the encoder makes them final (encoded in the I/O pool)."""
    encoder = StreamEncoder(fmt, first.sample_rate, first.channels)
    async for chunk in chunks:
        data = await server.admission.read(encoder.push, chunk)
        if data:
            yield data
    tail = await server.admission.read(encoder.close)
    if tail:
        yield tail


async def _counting(chunks: AsyncIterator[Audio], frames: list[int]) -> AsyncIterator[Audio]:
    """``chunks``, adding their frames to ``frames[0]`` (SSE's ``usage`` needs the count)."""
    async for chunk in chunks:
        frames[0] += chunk.frames
        yield chunk


def _event(data: bytes) -> bytes:
    event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
    return f"data: {json.dumps(event)}\n\n".encode()


async def _prepend(first: Audio, rest: AsyncIterator[Audio]) -> AsyncIterator[Audio]:
    yield first
    async for chunk in rest:
        yield chunk
