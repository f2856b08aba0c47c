"""The whole service (``create_app``) as a gateway in front of a real Piper HTTP server.

Both the service's own OpenAI route and the protocol routers of this package go
through the service's serving path (admission, X-Cache); the upstream's request
log shows which requests reached it.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import httpx
import pytest
import soundfile

from voxcache import Cache, CachedEngine
from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions
from voxcache.testing import forked
from voxcache.upstream import load_upstream

from .servers import free_port, piper_http_server, serve_app, wait_until

pytestmark = pytest.mark.piper


def test_service_gateway_hits_skip_the_upstream_and_survive_it(tmp_path) -> None:
    settings = Settings(cache_dir=tmp_path / "cache")
    cache = Cache(settings.cache_dir, settings.cache_config())
    with piper_http_server(tmp_path) as upstream:
        cached = CachedEngine(load_upstream(f"piper-http={upstream.url}", retries=0), cache)
        app = create_app(settings, options=ServiceOptions(), cached=cached)  # /tts etc. mounted
        with serve_app(app) as gateway:
            speech = {"model": "tts-1", "input": "Platform two.", "voice": "en_US-joe-medium",
                      "response_format": "wav"}
            first = httpx.post(f"{gateway}/v1/audio/speech", json=speech, timeout=60)
            upstream.wait_for_syntheses(1)
            second = httpx.post(f"{gateway}/v1/audio/speech", json=speech, timeout=60)
            tts = httpx.get(f"{gateway}/tts", params={"text": "Platform two.",
                                                      "text_lang": "en"}, timeout=60)
            sft = httpx.post(f"{gateway}/inference_sft",
                             data={"tts_text": "Platform three.", "spk_id": "en_US-joe-medium"},
                             timeout=60)
            upstream.wait_for_syntheses(2)
            refreshed = httpx.get(f"{gateway}/tts", params={"text": "Platform two.",
                                                            "text_lang": "en"},
                                  headers={"X-Cache-Mode": "refresh"}, timeout=60)
            upstream.wait_for_syntheses(3)
            bad_mode = httpx.get(f"{gateway}/tts", params={"text": "Platform two.",
                                                           "text_lang": "en"},
                                 headers={"X-Cache-Mode": "sometimes"}, timeout=60)
            upstream.stop()
            hit = httpx.get(f"{gateway}/tts", params={"text": "Platform two.",
                                                      "text_lang": "en"}, timeout=60)
            miss = httpx.post(f"{gateway}/v1/audio/speech",
                              json={**speech, "input": "Platform four."}, timeout=60)
            tts_miss = httpx.get(f"{gateway}/tts", params={"text": "Platform four.",
                                                           "text_lang": "en"}, timeout=60)
    cache.close()
    assert [r.status_code for r in (first, second, tts, sft, hit)] == [200] * 5
    assert [r.headers["X-Cache"] for r in (first, second, tts, sft, hit)] == [
        "MISS", "HIT", "HIT", "MISS", "HIT"]
    # the same take: /tts sends api_v2's plain 44-byte-header WAV of the stored samples
    assert tts.content[:4] == b"RIFF" and tts.content[36:40] == b"data"
    assert tts.content[44:] == soundfile.read(io.BytesIO(first.content), dtype="int16")[0
                                              ].tobytes()
    assert refreshed.status_code == 200 and refreshed.headers["X-Cache"] == "MISS"
    assert bad_mode.status_code == 400 and "X-Cache-Mode" in bad_mode.json()["message"]
    assert miss.status_code == 502 and "unreachable" in miss.text
    assert tts_miss.status_code == 502 and "unreachable" in tts_miss.json()["Exception"]


def test_voxcache_serve_upstream_flag_with_two_workers(tmp_path) -> None:
    """``voxcache serve --upstream KIND=URL --workers 2`` as a real process: the flag reaches
    every worker (they would otherwise quietly render with embedded Piper)."""
    with piper_http_server(tmp_path) as upstream:
        port = free_port()
        env = {**os.environ, "VOXCACHE_DIR": str(tmp_path / "c")}
        env.pop("VOXCACHE_UPSTREAM", None)
        log = (tmp_path / "serve.log").open("wb")
        process = forked.popen(
            [sys.executable, "-m", "voxcache", "serve", "--port", str(port), "--workers", "2",
             "--upstream", f"piper-http={upstream.url}", "--upstream-revision", "joe-test"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            def up() -> bool:
                assert process.poll() is None, (tmp_path / "serve.log").read_text()
                try:
                    return httpx.get(f"{url}/readyz", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(up, what="voxcache serve")
            speech = {"model": "piper-http", "input": "Gate closing.", "response_format": "wav"}
            answers = [httpx.post(f"{url}/v1/audio/speech", json=speech, timeout=60)
                       for _ in range(4)]
            engines = {httpx.get(f"{url}/v1/engine", timeout=5).json()["id"] for _ in range(6)}
            upstream.wait_for_syntheses(1)
        finally:
            process.terminate()
            process.wait(30)
            log.close()
    started = (tmp_path / "serve.log").read_text()
    assert "serving piper-http (piper-http|" in started and "rev=joe-test" in started
    assert [a.headers["X-Cache"] for a in answers][0] == "MISS"
    assert all(a.headers["X-Cache"] == "HIT" for a in answers[1:])
    assert engines == {"piper-http"}
    assert upstream.syntheses() == 1
