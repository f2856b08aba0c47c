"""A hostile upstream, as its own process: a center or an OpenAI/Piper-HTTP server whose
answers trickle, never end, or declare a length no one should buffer.

It is a raw asyncio HTTP/1.1 server (no framework: a framework would not let it lie about
``Content-Length`` or send headers a byte at a time). The text of the request picks the
behaviour, so one server answers well-behaved misses and hostile ones at the same time:

- ``trickle …``: the answer's headers arrive at once, then its body one byte every
  ``TRICKLE_SECONDS`` (every byte resets a per-read timeout), for ever;
- ``slowhead …``: the answer's *headers* arrive one byte every ``TRICKLE_SECONDS``;
- ``huge …``: ``Content-Length: 2147483648``, then zeros as fast as they are read;
- ``endless …``: a chunked body of zeros that never ends;
- ``stream …``: a good take sent as ``STREAM_CHUNKS`` chunks, one every
  ``STREAM_SECONDS`` (an OpenAI-compatible server streaming WAV), the last held until
  ``POST /_release`` (at most ``HOLD_SECONDS``): what a test does while a render is under
  way depends on its word, not on the clock;
- anything else: a good take at once.

It speaks three protocols at once (``python -m tests.protocols.hostile PORT FOLDER``):

- a voxcache center of the tone engine — ``/v1/packs/identity``, ``POST /v1/synthesize``
  (keyed as a real center keys it) and ``GET /v1/audio/{key}`` (the hostile behaviour is
  on this fetch, picked by the text of the synthesis that named the key);
- an OpenAI-compatible server: ``POST /v1/audio/speech`` answering WAV
  (``GET /v1/audio/voices``: 404, so OpenAI's voice names);
- Piper's HTTP server: ``/info``, ``/voices`` and ``POST /synthesize``.

``GET /_log`` answers the requests seen so far (method, path, text, headers), one JSON
list.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import struct
import sys
import wave
from pathlib import Path
from typing import Any

import numpy as np

TRICKLE_SECONDS = 2.0
STREAM_CHUNKS, STREAM_SECONDS = 4, 0.4
HOLD_SECONDS = 30.0
HUGE = 2 * 1024**3
RATE = 16000
ZEROS = bytes(64 * 1024)


def tone(text: str, seconds: float = 0.4, rate: int = RATE) -> bytes:
    """int16 PCM of a tone whose pitch follows the text."""
    t = np.arange(int(rate * seconds)) / rate
    pitch = 200 + sum(text.encode()) % 600
    return (0.3 * np.sin(2 * np.pi * pitch * t) * 32767).astype("<i2").tobytes()


def wav(pcm: bytes, rate: int = RATE, size: int | None = None) -> bytes:
    """A WAV file of ``pcm``; ``size`` overrides the data chunk's length (0xFFFFFFFF when
    streaming, as OpenAI does)."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    data = buffer.getvalue()
    if size is not None:
        data = data[:4] + struct.pack("<I", min(size + 36, 0xFFFFFFFF)) + data[8:40] + \
            struct.pack("<I", size) + data[44:]
    return data


class Hostile:
    """The routes of the three protocols; ``answer`` is the hostile part."""

    def __init__(self, folder: Path) -> None:
        from voxcache import Cache, CachedEngine
        from voxcache.engines.tone import ToneEngine

        self.log: list[dict[str, Any]] = []
        self.keys: dict[str, str] = {}  # center: key → text of the synthesis that named it
        self.last: dict[str, str] | None = None
        self.engine = ToneEngine()
        self.keyer = CachedEngine(self.engine, Cache(folder))
        self.released = asyncio.Event()

    async def handle(self, method: str, path: str, headers: dict[str, str], body: bytes,
                     writer: asyncio.StreamWriter) -> None:
        if path == "/_log":
            return await self.send(writer, 200, json.dumps(self.log).encode(), "application/json")
        if path == "/_release":
            self.released.set()
            return await self.send(writer, 200, b"{}", "application/json")
        key = path.rsplit("/", 1)[1] if method == "GET" and path.startswith("/v1/audio/") else ""
        text = self.keys.get(key, "") if key else _text(body)
        call: dict[str, Any] = {"method": method, "path": path, "text": text,
                                "headers": headers, "sent": 0}
        self.log.append(call)
        route = (method, path.split("?")[0])
        if route == ("POST", "/v1/synthesize"):
            return await self.synthesize(body, text, writer)
        if key:
            if key not in self.keys:
                return await self.send(writer, 404, b'{"error": {"message": "no entry"}}',
                                       "application/json")
            return await self.answer(writer, text, self.entry(key, text), "audio/wav", call)
        if route in (("POST", "/v1/audio/speech"), ("POST", "/synthesize")):
            self.last = {"text": text}  # what Piper's /info reports as "last"
            return await self.answer(writer, text, wav(tone(text)), "audio/wav", call)
        documents = {
            ("GET", "/v1/packs/identity"): self.identity,
            ("GET", "/info"): lambda: {"voice": {"name": "hostile", "language": "en-us",
                                                 "num_speakers": 1}, "last": self.last},
            ("GET", "/voices"): lambda: {"hostile": {"audio": {"sample_rate": RATE},
                                                     "inference": {}}},
        }
        if route in documents:
            return await self.send(writer, 200, json.dumps(documents[route]()).encode(),
                                   "application/json")
        return await self.send(writer, 404, b'{"detail": "Not Found"}', "application/json")

    def identity(self) -> dict[str, Any]:
        from voxcache.identity import describe

        return {"identity": describe(self.engine), "tenant": "default"}

    async def synthesize(self, body: bytes, text: str, writer: asyncio.StreamWriter) -> None:
        """A center's render: keyed as the real one keys it; the take is fetched by key."""
        from voxcache import SynthesisRequest

        data = json.loads(body)
        fields = {k: data.get(k) for k in ("text", "voice", "language", "speed", "params")}
        _, key = self.keyer.resolve_and_key(SynthesisRequest(**fields))
        self.keys[key] = text
        headers = {"X-Cache": "MISS", "X-Cache-Key": key}
        if text.startswith("slowhead"):
            return await self.trickle_head(writer, 200, headers)
        await self.send(writer, 200, b"\0" * 64, "audio/pcm", headers)

    def entry(self, key: str, text: str) -> bytes:
        from voxcache import Audio
        from voxcache.entry import audio_entry

        return audio_entry(key, Audio(tone(text), self.engine.sample_rate),
                           meta={"tenant": "default"}).blob

    async def answer(self, writer: asyncio.StreamWriter, text: str, good: bytes,
                     media: str, call: dict[str, Any]) -> None:
        """The behaviour the text asks for, around a good answer ``good`` (``call["sent"]``
        counts the chunks of a streamed one sent so far)."""
        if text.startswith("trickle"):
            await self.head(writer, 200, {"Content-Type": media,
                                          "Content-Length": str(len(good) + 10**6)})
            for byte in good + ZEROS * 16:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(TRICKLE_SECONDS)
        elif text.startswith("slowhead"):
            await self.trickle_head(writer, 200, {"Content-Type": media,
                                                  "Content-Length": str(len(good))})
            writer.write(good)
        elif text.startswith("huge"):
            await self.head(writer, 200, {"Content-Type": media, "Content-Length": str(HUGE)})
            await self.flood(writer, _streaming(good), chunked=False)
        elif text.startswith("endless"):
            await self.head(writer, 200, {"Content-Type": media,
                                          "Transfer-Encoding": "chunked"})
            await self.flood(writer, _streaming(good), chunked=True)
        elif text.startswith("stream"):
            await self.head(writer, 200, {"Content-Type": media,
                                          "Transfer-Encoding": "chunked"})
            pcm = tone(text, seconds=0.4 * STREAM_CHUNKS)
            step = len(pcm) // STREAM_CHUNKS
            for number in range(STREAM_CHUNKS):
                await asyncio.sleep(STREAM_SECONDS)
                if number == STREAM_CHUNKS - 1:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.released.wait(), HOLD_SECONDS)
                piece = pcm[number * step:(number + 1) * step]
                if number == 0:
                    piece = wav(b"", size=0xFFFFFFFF)[:44] + piece
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                await writer.drain()
                call["sent"] = number + 1
            writer.write(b"0\r\n\r\n")
        else:
            await self.send(writer, 200, good, media)

    async def flood(self, writer: asyncio.StreamWriter, first: bytes, chunked: bool) -> None:
        """``first``, then zeros as fast as the reader takes them, until it hangs up."""
        pieces = [first]
        while True:
            for piece in pieces:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
            pieces = [ZEROS]

    async def head(self, writer: asyncio.StreamWriter, status: int,
                   headers: dict[str, str]) -> None:
        writer.write(self.head_bytes(status, headers))
        await writer.drain()

    async def trickle_head(self, writer: asyncio.StreamWriter, status: int,
                           headers: dict[str, str]) -> None:
        for byte in self.head_bytes(status, {**headers, "Content-Length": "0",
                                             "X-Padding": "x" * 4000}):
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(TRICKLE_SECONDS)

    @staticmethod
    def head_bytes(status: int, headers: dict[str, str]) -> bytes:
        lines = [f"HTTP/1.1 {status} X", "Connection: close",
                 *(f"{k}: {v}" for k, v in headers.items())]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")

    async def send(self, writer: asyncio.StreamWriter, status: int, body: bytes, media: str,
                   headers: dict[str, str] | None = None) -> None:
        await self.head(writer, status, {"Content-Type": media,
                                         "Content-Length": str(len(body)), **(headers or {})})
        writer.write(body)
        await writer.drain()


def _streaming(good: bytes) -> bytes:
    """The start of an answer whose length its format does not say: a WAV header with
    unknown sizes (OpenAI's streamed WAV), or a center's entry cut to its first bytes."""
    return wav(b"", size=0xFFFFFFFF)[:44] if good[:4] == b"RIFF" and b"vxch" not in good[:200] \
        else good[:44]


def _text(body: bytes) -> str:
    """The text a request asks for (``text`` or OpenAI's ``input``), or ""."""
    try:
        data = json.loads(body) if body else {}
        return str(data.get("text") or data.get("input") or "")
    except (ValueError, AttributeError):
        return ""


async def serve(port: int, folder: Path) -> None:
    hostile = Hostile(folder)

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            method, path, _ = request_line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in
                       (line.partition(":") for line in lines if line)}
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            await hostile.handle(method, path, headers, body, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(connection, "127.0.0.1", port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), Path(sys.argv[2])))
