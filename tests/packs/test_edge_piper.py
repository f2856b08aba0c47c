"""The edge pattern end to end with real Piper: a center, a signed pack, an edge that goes offline.

The center renders with Piper and publishes; ``pack export`` on its folder, ``pack
import`` on the edge's; then the center is stopped. The edge serves the imported
phrases as HITs with the center's samples, answers a new phrase with 503 and
Retry-After — or, with a fallback engine, with that engine's take marked
``X-Cache: FALLBACK`` and stored only under the fallback's own key — and when the
center is back, the same phrase is the center's take under the center's key.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from voxcache.entry import decode

from .nodes import cli, cli_json, entry_files, free_port, serve, write_config

pytestmark = pytest.mark.piper

PHRASES = ["Doors closing.", "Your order is ready.", "Mind the gap, please."]
NEW = "This sentence was never rendered before."


def test_pack_to_an_edge_that_goes_offline(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    key, pub = keys
    center_dir, edge_dir, pack = tmp_path / "center", tmp_path / "edge", tmp_path / "p.vxpack"
    center_config = write_config(tmp_path / "center.toml",
                                 f'[packs]\nsigning_key = "{key}"\n')
    port = free_port()
    upstream = f"voxcache=http://127.0.0.1:{port}"
    with serve(center_dir, engine="piper", config=center_config, port=port) as center:
        center_wavs = {}
        for text in PHRASES:
            answer = center.say(text)
            assert answer.status_code == 200, answer.text
            center_wavs[text] = answer.content
        cli("--cache-dir", str(center_dir), "pack", "export", "--sign", str(key),
            "-o", str(pack))
        with serve(edge_dir, "--upstream", upstream) as edge:
            report = cli_json("--cache-dir", str(edge_dir), "pack", "import", str(pack),
                              "--trust", str(pub))
            assert report["imported"] == len(PHRASES) and report["complete"]
            center.stop()
            for text in PHRASES:
                answer = edge.say(text)
                assert answer.headers["x-cache"] == "HIT", answer.text
                assert answer.content == center_wavs[text]  # the center's samples, exactly
            stored_before = set(entry_files(edge_dir))
            refused = edge.say(NEW)
            assert refused.status_code == 503
            assert int(refused.headers["retry-after"]) >= 1
            assert refused.json()["error"]["code"] == "CenterUnreachable"
            assert set(entry_files(edge_dir)) == stored_before  # nothing stored for it
            again = edge.say(PHRASES[0])  # offline, hits go on
            assert again.headers["x-cache"] in ("HIT",) and again.content == center_wavs[
                PHRASES[0]]

    # The same edge with a local fallback engine, started while the center is still down.
    edge_config = write_config(tmp_path / "edge.toml",
                               'upstream_options = {fallback = "piper"}\n')
    with serve(edge_dir, "--upstream", upstream, config=edge_config) as edge:
        assert httpx.get(edge.url + "/v1/engine").json()["edge"]["identity_from"] == "record"
        assert edge.say(PHRASES[1]).headers["x-cache"] == "HIT"
        fallback = edge.say(NEW)
        assert fallback.status_code == 200, fallback.text
        assert fallback.headers["x-cache"] == "FALLBACK"
        assert fallback.headers["x-cache-fallback"] == "MISS"
        fallback_key = fallback.headers["x-cache-key"]
        stored = decode(entry_files(edge_dir)[fallback_key], fallback_key)
        assert stored.header.meta["model"].endswith("+edge-fallback")
        assert edge.say(NEW).headers["x-cache"] == "FALLBACK"  # served again, still marked

        with serve(center_dir, engine="piper", config=center_config, port=port) as center:
            from_center = center.say(NEW)
            center_key = from_center.headers["x-cache-key"]
            assert center_key != fallback_key
            assert center_key not in entry_files(edge_dir)  # never stored under it
            answer = _until_online(edge, NEW)
            assert answer.headers["x-cache"] == "MISS"  # fetched from the center
            assert answer.headers["x-cache-key"] == center_key
            assert answer.content == from_center.content
            assert edge.say(NEW).headers["x-cache"] == "HIT"


def _until_online(edge, text: str, seconds: float = 45.0) -> httpx.Response:
    """The edge's answer once its back-off has ended and it asks the center again."""
    deadline = time.monotonic() + seconds
    while True:
        answer = edge.say(text)
        if answer.headers.get("x-cache") != "FALLBACK" or time.monotonic() > deadline:
            return answer
        time.sleep(1.0)
