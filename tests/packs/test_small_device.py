"""A small device at its caps: an edge that keeps the few voices its clients use.

The documented small-device settings (docs/operating/edge.md) bound the memory tier per kind, the
disk in bytes and in entries. Here an edge under such caps serves three of a center's
six voices; then a pull brings all six. The caps hold throughout, every take of the
three voices in use survives (the eviction score ranks what is asked for above what
only arrived), hits go on, and the import says how much it had to let go at once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.config import Settings
from voxcache.engines.tone import ToneEngine
from voxcache.service import create_app
from voxcache.service.options import service_options

from .nodes import clean_env, cli, entry_files, serve, write_config
from .standin import Running

VOICES = [f"voice{i}" for i in range(1, 7)]
PHRASES = [f"Stop number {i} is next." for i in range(10)]
DEVICE = "device-key-0001"
CAPS = f"""
upstream_options = {{api_key = "{DEVICE}"}}
memory_budget = "32KB"
disk_max_bytes = "400KB"
disk_max_entries = 40
"""
ADMIN = "admin-key-small-device"


class SixVoices(ToneEngine):
    """The tone engine with six voices (each sounds different)."""

    voices = {name: name for name in VOICES}
    default_voice = VOICES[0]


def test_an_edge_at_small_device_caps_keeps_the_voices_in_use(tmp_path: Path, keys) -> None:
    key, pub = keys
    settings = Settings(cache_dir=tmp_path / "center", engine="tone", extra={
        "packs": {"signing_key": str(key)}, "admin": {"api_keys": [ADMIN]},
        "tenants": {"default": {"api_keys": [DEVICE]}}})  # the devices' tenant
    center_cache = Cache(settings.cache_dir)
    app = create_app(settings, options=service_options(settings),
                     cached=CachedEngine(SixVoices(), center_cache))
    caps = write_config(tmp_path / "edge.toml", CAPS)
    edge_dir = tmp_path / "edge"
    try:
        with Running(app) as center, \
                serve(edge_dir, "--upstream", f"voxcache={center.url}", config=caps) as edge:
            for voice in VOICES:  # the center has every voice
                for text in PHRASES:
                    center_say(center.url, text, voice)
            in_use = {}
            for voice in VOICES[:3]:  # the device's clients use three of them
                for text in PHRASES:
                    in_use[(voice, text)] = edge.say(text, voice=voice).headers["x-cache-key"]
                    assert edge.say(text, voice=voice).headers["x-cache"] == "HIT"
            time.sleep(2.5)  # the edge flushes hits and recency to its index every 2 s

            pulled = cli("--cache-dir", str(edge_dir), "--config", str(caps), "pack", "pull",
                         center.url, "--trust", str(pub), "--json",
                         env=clean_env(VOXCACHE_PACKS_API_KEY=ADMIN))
            report = json.loads(pulled.stdout.strip().splitlines()[-1])
            assert report["imported"] == 30 and report["kept"] + report["skipped"] == 30
            assert report["evicted"] > 0  # more arrived than fits: let go at once

            disk = json.loads(cli("--cache-dir", str(edge_dir), "--config", str(caps),
                                  "stats", "--json").stdout)["tiers"]["disk"]
            assert disk["entries"] <= 40 and disk["bytes"] <= 400_000
            held = entry_files(edge_dir)
            assert len(held) == disk["entries"]
            assert set(in_use.values()) <= set(held)  # every take in use survived
            for (voice, text), stored_key in in_use.items():
                answer = edge.say(text, voice=voice)
                assert answer.headers["x-cache"] == "HIT"
                assert answer.headers["x-cache-key"] == stored_key
            memory = edge.stats()["tiers"]["memory"]
            assert all(kind["bytes"] <= kind["budget"] == 32_000 for kind in memory.values())
    finally:
        center_cache.close()


def center_say(url: str, text: str, voice: str) -> None:
    import httpx

    answer = httpx.post(url + "/v1/synthesize", json={"text": text, "voice": voice},
                        headers={"Authorization": f"Bearer {DEVICE}"}, timeout=30)
    assert answer.status_code == 200, answer.text

