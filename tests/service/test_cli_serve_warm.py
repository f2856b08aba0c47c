"""``voxcache serve`` and ``voxcache warm`` as real commands."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time

import httpx
import pytest
import soundfile

from voxcache.cache import Cache
from voxcache.testing import forked


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return forked.run([sys.executable, "-m", "voxcache.cli", *args], capture_output=True,
                      text=True, timeout=120)


def test_warm_renders_missing_pins_and_reports_failures(tmp_path) -> None:
    phrases = tmp_path / "phrases.yaml"
    phrases.write_text("phrases:\n"
                       "  - {text: 'Welcome! Please order at the counter.', pin: true}\n"
                       "  - {text: 'Mind the gap.', voice: bass, params: {pitch: 1.5}}\n"
                       "  - {text: 'Nobody speaks this.', language: tlh}\n"
                       "  - {text: 'Nobody sings this.', voice: soprano}\n")
    cache_dir = tmp_path / "cache"
    first = run_cli("--cache-dir", str(cache_dir), "--engine", "tone", "warm", str(phrases),
                    "--json")
    assert first.returncode == 1, first.stderr  # the unknown voice is a real failure
    summary = json.loads(first.stdout)
    assert (summary["rendered"], summary["cached"], summary["pinned"]) == (2, 0, 1)
    assert [f["text"] for f in summary["failed"]] == ["Nobody sings this."]
    assert "soprano" in summary["failed"][0]["error"]
    # A language the engine does not speak is skipped and counted, not failed.
    assert (summary["skipped"], summary["skipped_languages"]) == (1, {"tlh": 1})
    assert "tlh (1)" in first.stderr
    second = run_cli("--cache-dir", str(cache_dir), "--engine", "tone", "warm", str(phrases),
                     "--json", "--pin")
    summary = json.loads(second.stdout)
    assert (summary["rendered"], summary["cached"], summary["pinned"]) == (0, 2, 2)
    cache = Cache(cache_dir)
    try:
        assert len(cache.folder.index.rows("pinned = 1")) == 2
    finally:
        cache.close()


def test_warm_refuses_unknown_fields(tmp_path) -> None:
    phrases = tmp_path / "p.json"
    phrases.write_text(json.dumps([{"text": "hi", "volume": 3}]))
    result = run_cli("--cache-dir", str(tmp_path / "c"), "--engine", "tone", "warm",
                     str(phrases))
    assert result.returncode == 2 and "volume" in result.stderr


def test_serve_refuses_a_public_bind_without_keys(tmp_path) -> None:
    result = run_cli("--cache-dir", str(tmp_path / "c"), "--engine", "tone", "serve",
                     "--host", "0.0.0.0", "--port", "1")
    assert result.returncode == 2 and "--allow-public" in result.stderr


def test_serve_logs_limits_prints_address_and_shuts_down_gracefully(tmp_path, serve_proc) -> None:
    with serve_proc(tmp_path / "cache") as (url, proc):
        r = httpx.post(f"{url}/v1/synthesize", json={"text": "Served by the CLI."}, timeout=30)
        assert r.status_code == 200 and r.headers["x-cache"] == "MISS"
        assert httpx.get(f"{url}/", timeout=10).text.startswith("<!doctype html>")
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert f"on {url}" in output
    assert '"render_concurrency"' in output and '"model_revision"' in output


def test_sigterm_lets_an_in_flight_render_finish_and_be_stored(tmp_path, serve_proc) -> None:
    import threading

    cache_dir = tmp_path / "cache"
    result: dict[str, httpx.Response] = {}
    with serve_proc(cache_dir) as (url, proc):
        body = {"text": "Finish me. Before you go.", "params": {"delay": 0.75}}
        worker = threading.Thread(target=lambda: result.setdefault(
            "r", httpx.post(f"{url}/v1/synthesize", json=body, timeout=60)))
        worker.start()
        deadline = time.monotonic() + 20
        while httpx.get(f"{url}/v1/stats", timeout=5).json()["renders"]["running"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        worker.join(timeout=60)
        proc.wait(timeout=60)
    assert proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal it handled
    assert result["r"].status_code == 200 and result["r"].headers["x-cache"] == "MISS"
    cache = Cache(cache_dir)
    try:
        assert cache.folder.get(result["r"].headers["x-cache-key"]) is not None
    finally:
        cache.close()


def test_config_file_sets_limits_tenants_and_voice_aliases(tmp_path, serve_proc) -> None:
    config = tmp_path / "voxcache.toml"
    config.write_text('[service]\nrender_queue = 3\nmax_body_bytes = "2KB"\n\n'
                      '[tenants.acme]\napi_keys = ["acme-secret-key"]\n\n'
                      '[admin]\napi_keys = ["ops-secret-key"]\n\n'
                      '[voice_aliases]\nnova = "bass"\n')
    with serve_proc(tmp_path / "cache", config=config) as (url, _proc):
        refused = httpx.post(f"{url}/v1/audio/speech", json={"input": "hi"}, timeout=60)
        assert refused.status_code == 401
        auth = {"Authorization": "Bearer acme-secret-key"}
        assert httpx.get(f"{url}/v1/stats", headers=auth).status_code == 403  # a tenant's key
        stats = httpx.get(f"{url}/v1/stats",
                          headers={"Authorization": "Bearer ops-secret-key"}).json()
        voices = httpx.get(f"{url}/v1/voices", headers=auth).json()
        nova = httpx.post(f"{url}/v1/audio/speech", headers=auth, timeout=30,
                          json={"input": "Alias.", "voice": "nova", "response_format": "wav"})
        bass = httpx.post(f"{url}/v1/audio/speech", headers=auth, timeout=30,
                          json={"input": "Alias.", "voice": "bass", "response_format": "wav"})
        big = httpx.post(f"{url}/v1/audio/speech", headers=auth, json={"input": "x" * 3000},
                         timeout=60)
    assert stats["renders"]["queue_limit"] == 3
    assert voices["aliases"]["nova"] == "bass" and voices["aliases"]["alloy"] == "alto"
    assert (nova.headers["x-cache"], bass.headers["x-cache"]) == ("MISS", "HIT")
    assert big.status_code == 413


def test_unknown_service_setting_is_refused(tmp_path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[service]\nrender_slots = 2\n")
    result = run_cli("--cache-dir", str(tmp_path / "c"), "--engine", "tone", "--config",
                     str(config), "serve")
    assert result.returncode == 2 and "render_slots" in result.stderr


@pytest.mark.piper
def test_the_default_service_speaks_with_piper(tmp_path, serve_proc) -> None:
    """`voxcache serve` as shipped: Piper, segment mode auto, the OpenAI route, a hit."""
    body = {"model": "tts-1", "voice": "alloy", "response_format": "wav",
            "input": "Welcome! Please scan the code on your table to order."}
    with serve_proc(tmp_path / "cache", engine="piper") as (url, _proc):
        first = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
        second = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
        ready = httpx.get(f"{url}/readyz").json()
    assert (first.headers["x-cache"], second.headers["x-cache"]) == ("MISS", "HIT")
    samples, rate = soundfile.read(io.BytesIO(second.content), dtype="int16")
    assert rate == 22050 and len(samples) > rate and ready["engine"] == "piper"


def test_direct_warm_runs_at_the_lowest_cpu_priority(tmp_path) -> None:
    """The engine's threads inherit niceness 19, so a live server's renders go first."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import os, sys\n"
        "from voxcache.cli import main\n"
        "from voxcache.engines import tone\n"
        "def render(self, request, _inner=tone.ToneEngine.render):\n"
        "    print('nice', os.nice(0), flush=True)\n"
        "    yield from _inner(self, request)\n"
        "tone.ToneEngine.render = render\n"
        "sys.exit(main(sys.argv[1:]))\n")
    phrases = tmp_path / "p.json"
    phrases.write_text('["Low priority."]')
    out = forked.run([sys.executable, str(probe), "--cache-dir", str(tmp_path / "c"),
                      "--engine", "tone", "warm", str(phrases), "--json"],
                     capture_output=True, text=True, timeout=60)
    assert "nice 19" in out.stdout, out.stdout + out.stderr
