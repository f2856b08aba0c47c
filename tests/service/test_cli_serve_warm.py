"""``voxcache serve`` and ``voxcache warm`` as real commands."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx

from voxcache.cache import Cache


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "voxcache.cli", *args], capture_output=True,
                          text=True, timeout=120)


def test_warm_renders_missing_pins_and_reports_failures(tmp_path) -> None:
    phrases = tmp_path / "phrases.yaml"
    phrases.write_text("phrases:\n"
                       "  - {text: 'Welcome! Please order at the counter.', pin: true}\n"
                       "  - {text: 'Mind the gap.', voice: bass, params: {pitch: 1.5}}\n"
                       "  - {text: 'Nobody speaks this.', language: tlh}\n")
    cache_dir = tmp_path / "cache"
    first = run_cli("--cache-dir", str(cache_dir), "--engine", "tone", "warm", str(phrases),
                    "--json")
    assert first.returncode == 1, first.stderr
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert (summary["rendered"], summary["cached"], summary["pinned"]) == (2, 0, 1)
    assert "tlh" in summary["failed"][0]["error"]
    second = run_cli("--cache-dir", str(cache_dir), "--engine", "tone", "warm", str(phrases),
                     "--json", "--pin")
    summary = json.loads(second.stdout.strip().splitlines()[-1])
    assert (summary["rendered"], summary["cached"], summary["pinned"]) == (0, 2, 2)
    cache = Cache(cache_dir)
    try:
        assert len(cache.disk.index.rows("pinned = 1")) == 2
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
