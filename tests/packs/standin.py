"""A stand-in for a center that answers garbage: the identity of a real tone center, then
takes that are not what was asked for. It runs uvicorn in a thread on a free port."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import uvicorn
from fastapi import FastAPI, Request, Response

from voxcache import Audio, Cache, CachedEngine, SynthesisRequest
from voxcache.engines.tone import ToneEngine
from voxcache.entry import audio_entry, blob_entry

from .nodes import free_port

MODES = ("random bytes", "another key's entry", "one byte flipped", "a plain wav",
         "not audio", "render under another key", "render then garbage")


def garbage_center(folder: Path) -> tuple[FastAPI, dict[str, Any]]:
    """The app, and its state (``mode`` picks the lie; ``calls`` records what was asked)."""
    from voxcache.identity import describe  # new with edges: imported where used

    engine = ToneEngine()
    keyer = CachedEngine(engine, Cache(folder))
    state: dict[str, Any] = {"mode": MODES[0], "calls": []}
    app = FastAPI()

    def take(key: str) -> bytes:
        pcm = Audio.from_float(np.sin(np.arange(4000) / 9.0), engine.sample_rate)
        return audio_entry(key, pcm, meta={"tenant": "default"}).blob

    @app.get("/readyz")
    async def ready() -> dict[str, str]:
        return {"status": "ready"}

    @app.get("/v1/packs/identity")
    async def identity() -> dict[str, Any]:
        return {"identity": describe(engine), "tenant": "default"}

    @app.get("/v1/audio/{key}")
    async def stored(key: str) -> Response:
        state["calls"].append(("GET", key))
        mode = state["mode"]
        if mode == "render under another key" or (
                mode == "render then garbage" and ("POST", key) not in state["calls"]):
            return Response(status_code=404)
        blob = {"random bytes": lambda: np.random.default_rng(1).bytes(5000),
                "another key's entry": lambda: take("f" * 64),
                "one byte flipped": lambda: _flip(take(key)),
                "a plain wav": lambda: take(key)[:44] + take(key)[-8000:],
                "not audio": lambda: blob_entry(key, "encoded", b"x" * 100,
                                                "audio/mpeg").blob,
                "render then garbage": lambda: _flip(take(key), at=-3)}[mode]()
        return Response(blob, media_type="audio/wav")

    @app.post("/v1/synthesize")
    async def synthesize(request: Request) -> Response:
        body = await request.json()
        fields = {k: body.get(k) for k in ("text", "voice", "language", "speed", "params")}
        _, key = keyer.resolve_and_key(SynthesisRequest(**fields))
        state["calls"].append(("POST", key))
        answered = "e" * 64 if state["mode"] == "render under another key" else key
        return Response(b"\0" * 100, media_type="audio/pcm",
                        headers={"X-Cache": "MISS", "X-Cache-Key": answered})

    return app, state


def _flip(blob: bytes, at: int = 200) -> bytes:
    changed = bytearray(blob)
    changed[at] ^= 1
    return bytes(changed)


class Running:
    """uvicorn serving an app in a thread (stopped on exit)."""

    def __init__(self, app: FastAPI) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Running:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive()
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
