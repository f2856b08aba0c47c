"""An edge in front of a center (``serve --upstream voxcache=URL``), real processes on free ports.

The center is ``voxcache serve`` with the tone engine (these tests are about what the
edge fetches, verifies, stores and refuses; test_edge_piper shows it with Piper).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.config import Settings
from voxcache.engines.tone import ToneEngine
from voxcache.entry import decode
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

from .nodes import entry_files, serve, write_config
from .standin import MODES, Running, garbage_center


def syntheses(node) -> int:
    return node.stats()["counters"].get("syntheses", 0)


def test_a_miss_is_asked_by_key_first_then_rendered_once_at_the_center(tmp_path: Path):
    with serve(tmp_path / "center") as center, \
            serve(tmp_path / "edge", "--upstream", f"voxcache={center.url}") as edge:
        warmed = center.say("Your order is ready.")
        rendered = syntheses(center)
        fetched = edge.say("Your order is ready.")
        assert fetched.headers["x-cache"] == "MISS"
        assert fetched.headers["x-cache-key"] == warmed.headers["x-cache-key"]
        assert fetched.content == warmed.content
        assert syntheses(center) == rendered  # the center's stored take, not a new render

        new = edge.say("Doors closing. Mind the gap.")
        assert new.headers["x-cache"] == "MISS"
        assert syntheses(center) > rendered  # rendered there (sentence by sentence)
        at_center = center.say("Doors closing. Mind the gap.")
        assert at_center.headers["x-cache"] == "HIT"
        assert at_center.headers["x-cache-key"] == new.headers["x-cache-key"]
        assert at_center.content == new.content
        assert edge.say("Doors closing. Mind the gap.").headers["x-cache"] == "HIT"

        stored = entry_files(tmp_path / "edge")
        assert set(stored) == {warmed.headers["x-cache-key"], new.headers["x-cache-key"]}
        for key, blob in stored.items():
            decode(blob, key)
        counters = edge.stats()["counters"]
        assert counters["edge_center_hits"] == 1 and counters["edge_center_renders"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_an_edge_stores_nothing_a_garbage_center_sends(tmp_path: Path, mode: str):
    app, state = garbage_center(tmp_path / "standin")
    state["mode"] = mode
    with Running(app) as standin, \
            serve(tmp_path / "edge", "--upstream", f"voxcache={standin.url}") as edge:
        answer = edge.say("Your order is ready.")
        assert answer.status_code == 502, (mode, answer.status_code, answer.text)
        assert "nothing was stored" in answer.json()["error"]["message"] or mode == (
            "render then garbage")
        assert entry_files(tmp_path / "edge") == {}
        assert edge.say("Your order is ready.").status_code == 502  # still nothing to serve


def test_offline_hits_are_served_misses_get_503_and_the_edge_restarts_offline(tmp_path):
    with serve(tmp_path / "center") as center:
        edge_args = ("--upstream", f"voxcache={center.url}")
        with serve(tmp_path / "edge", *edge_args) as edge:
            kept = edge.say("Welcome to the store.").content
            center.stop()
            hit = edge.say("Welcome to the store.")
            assert hit.headers["x-cache"] == "HIT" and hit.content == kept
            miss = edge.say("Something new.")
            assert miss.status_code == 503 and int(miss.headers["retry-after"]) >= 1
            assert "unreachable" in miss.json()["error"]["message"]
            assert httpx.get(edge.url + "/v1/engine").json()["edge"]["offline"] is True
        with serve(tmp_path / "edge", *edge_args) as edge:  # starts on its record
            assert httpx.get(edge.url + "/v1/engine").json()["edge"]["identity_from"] == \
                "record"
            assert edge.say("Welcome to the store.").content == kept
            assert edge.say("Something new.").status_code == 503
        with pytest.raises(RuntimeError, match="no record of its identity"), \
                serve(tmp_path / "fresh", *edge_args):
            pass


def test_the_edge_is_the_center_tenant_of_its_key(tmp_path: Path):
    center_config = write_config(tmp_path / "center.toml", """
[tenants.shop]
api_keys = ["shop-key-0001"]
[admin]
api_keys = ["admin-key-0001"]
""")
    shop = {"Authorization": "Bearer shop-key-0001"}
    with serve(tmp_path / "center", config=center_config) as center:
        upstream = ("--upstream", f"voxcache={center.url}")
        with pytest.raises(RuntimeError, match="API key"), \
                serve(tmp_path / "keyless", *upstream):  # no key: refused at start
            pass
        keyed = write_config(tmp_path / "edge.toml",
                             'upstream_options = {api_key = "shop-key-0001"}\n')
        with serve(tmp_path / "open-edge", *upstream, config=keyed) as edge:
            refused = edge.say("Hello.")  # local clients are tenant "default" here
            assert refused.status_code == 502
            assert "[tenants.shop]" in refused.json()["error"]["message"]
            assert entry_files(tmp_path / "open-edge") == {}
        local = write_config(tmp_path / "shop-edge.toml", """
upstream_options = {api_key = "shop-key-0001"}
[tenants.shop]
api_keys = ["local-shop-key-01"]
""")
        with serve(tmp_path / "shop-edge", *upstream, config=local) as edge:
            mine = edge.say("Hello.", headers={"Authorization": "Bearer local-shop-key-01"})
            assert mine.status_code == 200 and mine.headers["x-cache"] == "MISS"
            theirs = center.say("Hello.", headers=shop)
            assert theirs.headers["x-cache"] == "HIT"
            assert theirs.headers["x-cache-key"] == mine.headers["x-cache-key"]


def test_the_edge_follows_the_centers_new_model_revision(tmp_path: Path):
    """The center switches its model under the edge: the first miss after it is sent back
    (503: it was keyed with the old revision), then the edge keys with the new one."""
    engine = ToneEngine("tone-1")
    settings = Settings(cache_dir=tmp_path / "center", engine="tone")
    cache = Cache(settings.cache_dir)
    app = create_app(settings, options=ServiceOptions(), cached=CachedEngine(engine, cache))
    try:
        with Running(app) as center, \
                serve(tmp_path / "edge", "--upstream", f"voxcache={center.url}") as edge:
            assert edge.say("Before the upgrade.").headers["x-cache"] == "MISS"
            engine.model_revision = "tone-2"
            moved = edge.say("After the upgrade.")
            assert moved.status_code == 503 and moved.json()["error"]["code"] == "CenterMoved"
            assert httpx.get(edge.url + "/v1/engine").json()["model_revision"] == "tone-2"
            after = edge.say("After the upgrade.")
            assert after.status_code == 200 and after.headers["x-cache"] == "MISS"
            direct = httpx.post(center.url + "/v1/synthesize",
                                json={"text": "After the upgrade."}, timeout=60)
            assert direct.headers["x-cache-key"] == after.headers["x-cache-key"]
            again = edge.say("Before the upgrade.")  # keyed with tone-2 now: a new take
            assert again.headers["x-cache"] == "MISS"
            record = json.loads((tmp_path / "edge" / "packs" / "identity.json").read_text())
            assert record["identity"]["model_revision"] == "tone-2"
    finally:
        cache.close()


class SixVoices(ToneEngine):
    voices = {f"voice{i}": f"voice{i}" for i in range(1, 7)}
    default_voice = "voice1"


def test_offline_misses_go_to_the_fallback_in_any_route_or_get_the_503(tmp_path: Path):
    settings = Settings(cache_dir=tmp_path / "center", engine="tone")
    cache = Cache(settings.cache_dir)
    app = create_app(settings, options=ServiceOptions(), cached=CachedEngine(SixVoices(), cache))
    fallback = write_config(tmp_path / "edge.toml", 'upstream_options = {fallback = "tone"}\n')
    center = Running(app).__enter__()
    try:
        with serve(tmp_path / "edge", "--upstream", f"voxcache={center.url}",
                   config=fallback) as edge:
            kept = edge.say("Kept while online.", voice="voice5")
            assert kept.headers["x-cache"] == "MISS"
            center.__exit__(None, None, None)  # the center goes away
            assert edge.say("Kept while online.", voice="voice5").headers["x-cache"] == "HIT"
            plain = edge.say("Said while offline.")  # the fallback's default voice renders it
            assert plain.status_code == 200 and plain.headers["x-cache"] == "FALLBACK"
            streamed = httpx.post(edge.url + "/v1/audio/speech", timeout=30, json={
                "input": "Streamed while offline. Two sentences.", "response_format": "pcm"})
            assert streamed.status_code == 200 and streamed.headers["x-cache"] == "FALLBACK"
            assert streamed.headers["content-type"].startswith("audio/pcm")
            assert streamed.content
            refused = edge.say("Only the center has this voice.", voice="voice5")
            assert refused.status_code == 503  # the fallback has no voice5: the edge's answer
            assert refused.json()["error"]["code"] == "CenterUnreachable"
            assert "retry-after" in refused.headers
    finally:
        center.__exit__(None, None, None)
        cache.close()
