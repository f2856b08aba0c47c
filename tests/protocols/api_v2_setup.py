"""What the api_v2 fidelity tests share: an upstream's working folder, the gateway in front
of it, and reading what a client receives (a WAV's bytes 44.., a streamed body)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

from .servers import serve_app
from .standins import ApiV2, wav_bytes

WEIGHTS = {"gpt_a": "GPT_weights/voice-e15.ckpt", "gpt_b": "GPT_weights/voice-e30.ckpt",
           "sovits_a": "SoVITS_weights/voice_e8.pth"}


def voice(path: Path, pitch: float, seconds: float = 4.0) -> Path:
    """A reference clip GPT-SoVITS accepts (3–10 s), its pitch telling clips apart."""
    t = np.arange(int(16000 * seconds)) / 16000
    path.write_bytes(wav_bytes((0.3 * np.sin(2 * np.pi * pitch * t) * 32767).astype("<i2"),
                               16000))
    return path


def upstream_folder(tmp_path: Path) -> tuple[Path, Path]:
    """An api_v2 working folder (clips ``a.wav``/``b.wav``, two GPT weights, one SoVITS) and
    its config naming ``gpt_a`` and ``sovits_a``; returns (folder, config)."""
    root = tmp_path / "upstream"
    root.mkdir(exist_ok=True)
    voice(root / "a.wav", 300)
    voice(root / "b.wav", 520)
    for name, path in WEIGHTS.items():
        (root / path).parent.mkdir(exist_ok=True)
        (root / path).write_bytes(b"weights " + name.encode())
    config = tmp_path / "tts_infer.json"
    config.write_text(f'{{"t2s_weights_path": "{WEIGHTS["gpt_a"]}", '
                      f'"vits_weights_path": "{WEIGHTS["sovits_a"]}"}}')
    return root, config


def body(**fields: Any) -> dict[str, Any]:
    """A complete api_v2 request (relative paths: the upstream's working folder is the
    gateway's one reference root, mounted at the same path)."""
    return {"text": "Platform two.", "text_lang": "en", "ref_audio_path": "a.wav",
            "prompt_lang": "en", "prompt_text": "Hello there.", **fields}


@contextlib.contextmanager
def gateway(url: str, root: Path, cache_dir: Path, options: ServiceOptions | None = None,
            **settings: Any) -> Iterator[str]:
    """``voxcache serve --upstream gpt-sovits=URL`` as an app (``open_cached_engine``:
    the switch state is attached exactly as ``serve`` attaches it) on a live server."""
    config = Settings(cache_dir=cache_dir, upstream=f"gpt-sovits={url}",
                      reference_roots=[root], **settings)
    app = create_app(config, options=options or ServiceOptions())
    try:
        with serve_app(app) as address:
            yield address
    finally:
        app.state.server.cached.usage.close()
        app.state.server.cache.close()


@contextlib.contextmanager
def standin(tmp_path: Path, interval: float = 0.0, chunks: int = 3) -> Iterator[
        tuple[ApiV2, str]]:
    """An ``ApiV2`` stand-in on a live server over ``upstream_folder(tmp_path)``."""
    root, config = upstream_folder(tmp_path)
    upstream = ApiV2(root, config, interval=interval, chunks=chunks)
    with serve_app(upstream.app) as url:
        yield upstream, url


def pcm_of(wav: bytes) -> bytes:
    """What a client that skips a 44-byte header plays."""
    return wav[44:]


@dataclass
class Received:
    """A streamed response as a client saw it: status, headers, bytes, and when they came."""

    status: int
    headers: httpx.Headers
    content: bytes = b""
    first_byte: float | None = None
    """``time.monotonic()`` when the first body byte arrived."""
    ended: float | None = None
    error: Exception | None = None
    """Set when the body broke off instead of ending cleanly."""
    arrivals: list[float] = field(default_factory=list)


def receive(url: str, json_body: dict[str, Any], path: str = "/tts") -> Received:
    """POST and read the body as it streams, noting when bytes arrive (and a torn end)."""
    with httpx.stream("POST", f"{url}{path}", json=json_body, timeout=60) as response:
        got = Received(response.status_code, response.headers)
        try:
            for chunk in response.iter_raw():
                now = time.monotonic()
                got.first_byte = got.first_byte or now
                got.arrivals.append(now)
                got.content += chunk
        except httpx.HTTPError as exc:
            got.error = exc
        got.ended = time.monotonic()
    return got
