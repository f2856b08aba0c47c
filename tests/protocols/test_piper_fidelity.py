"""Piper's own routes on the gateway: a client of ``python -m piper.http_server`` changes only
the address. Every request below goes to the REAL Piper server and to ``voxcache serve
--upstream piper-http=…`` (a real process) in front of it, and the answers are compared
byte for byte; the gateway's are cached (the second is a HIT, the upstream's request log
counts one synthesis).
"""

from __future__ import annotations

import httpx
import pytest

from tests.packs.nodes import serve, write_config

from .servers import hostile_server, piper_http_server

pytestmark = pytest.mark.piper
QUIET = {"noise_scale": 0, "noise_w_scale": 0}  # Piper is deterministic without noise


def test_piper_clients_get_pipers_own_answers_cached(tmp_path) -> None:
    base = {"text": "Mind the gap.", **QUIET}
    alike = [  # each is the same take for Piper: text stripped, unknowns ignored
        {**base, "text": "  Mind the gap.  "},
        {**base, "voice": "nobody"},  # a voice it lacks: its default voice
        {**base, "speaker_id": 5},  # a single-speaker voice ignores speakers
        {**base, "speaker": "alice", "length_scale": "1"},  # float() of a string
        {**base, "foo": "bar"},
    ]
    with piper_http_server(tmp_path) as piper, \
            serve(tmp_path / "cache", "--upstream", f"piper-http={piper.url}") as gateway:
        direct = httpx.post(f"{piper.url}/synthesize", json=base, timeout=60)
        before = piper.syntheses()
        first = httpx.post(f"{gateway.url}/synthesize", json=base, timeout=60)
        piper.wait_for_syntheses(before + 1)
        info_gateway = httpx.get(f"{gateway.url}/info", timeout=10)
        info_direct = httpx.get(f"{piper.url}/info", timeout=10)  # "last": the gateway's miss
        again = [httpx.post(f"{gateway.url}/synthesize", json=body, timeout=60)
                 for body in (base, *alike)]
        direct_alike = [httpx.post(f"{piper.url}/synthesize", json=body, timeout=60)
                        for body in alike]
        voices = (httpx.get(f"{piper.url}/voices", timeout=10),
                  httpx.get(f"{gateway.url}/voices", timeout=10))
        syntheses = piper.syntheses() - len(alike)
        other = httpx.post(f"{gateway.url}/synthesize", json={**base, "text": "Doors open."},
                           timeout=60)
        piper.stop()
        offline_info = httpx.get(f"{gateway.url}/info", timeout=10)
        offline_hit = httpx.post(f"{gateway.url}/synthesize", json=base, timeout=60)
        offline_miss = httpx.post(f"{gateway.url}/synthesize", json={"text": "Never heard."},
                                  timeout=60)

    assert direct.status_code == first.status_code == 200
    assert first.headers["content-type"] == "audio/wav"
    assert first.content == direct.content  # Piper's own bytes, header included
    assert first.headers["x-cache"] == "MISS"
    assert [r.headers["x-cache"] for r in again] == ["HIT"] * len(again)
    assert all(r.content == direct.content for r in again)
    assert all(r.content == direct.content for r in direct_alike)  # Piper agrees: one take
    assert syntheses == before + 1  # five more asks, no more renders
    assert other.headers["x-cache"] == "MISS"
    # /info is the server's own (its "last" is what the gateway's miss made it say)
    assert info_gateway.status_code == 200 and info_gateway.content == info_direct.content
    assert voices[1].status_code == 200 and voices[1].content == voices[0].content
    assert offline_info.status_code == 200
    assert offline_info.json() == {**info_direct.json(), "last": None}
    assert offline_hit.headers["x-cache"] == "HIT" and offline_hit.content == direct.content
    assert offline_miss.status_code == 502
    assert offline_miss.headers["content-type"] == "text/html; charset=utf-8"
    assert "<title>502 Bad Gateway</title>" in offline_miss.text
    assert "unreachable" in offline_miss.text


def test_what_piper_answers_with_a_500_is_a_400_in_its_shape(tmp_path) -> None:
    """Piper's server crashes (500, a generic page) on a body it cannot use; the gateway
    answers Flask's page for a 400 with what to fix. Methods a route does not take: 405
    from both."""
    cases = [({"json": {}}, "No text provided"), ({"json": {"text": "   "}}, "No text provided"),
             ({"content": b"not json"}, "the body must be a JSON object"),
             ({"json": [1, 2]}, "the body must be a JSON object"),
             ({"json": {"text": 5}}, "text must be a string"),
             ({"json": {"text": "Hi.", "length_scale": "fast"}}, "length_scale must be a number"),
             ({"json": {"text": "Hi.", "length_scale": 6}}, "length_scale")]
    with piper_http_server(tmp_path) as piper, \
            serve(tmp_path / "cache", "--upstream", f"piper-http={piper.url}") as gateway:
        answers = [(httpx.post(f"{piper.url}/synthesize", timeout=60, **call),
                    httpx.post(f"{gateway.url}/synthesize", timeout=60, **call), reason)
                   for call, reason in cases]
        wrong_method = [(httpx.request(method, f"{url}{path}", timeout=10), method, path)
                        for url in (piper.url, gateway.url)
                        for method, path in (("GET", "/synthesize"), ("POST", "/info"),
                                             ("DELETE", "/voices"))]
    for theirs, ours, reason in answers:
        assert theirs.status_code in (200, 500)  # Piper renders length_scale 6 (and crashes
        assert ours.status_code == 400, ours.text  # on the rest); the gateway refuses
        assert ours.headers["content-type"] == "text/html; charset=utf-8"
        assert ours.text.startswith("<!doctype html>\n<html lang=en>\n"
                                    "<title>400 Bad Request</title>\n<h1>Bad Request</h1>\n")
        assert reason in ours.text
    for answer, method, path in wrong_method:
        assert answer.status_code == 405, (method, path, answer.text)
        assert "GET" in answer.headers["allow"] if path != "/synthesize" else \
            "POST" in answer.headers["allow"]


def test_with_api_keys_piper_routes_need_a_key_and_info_names_no_ones_text(tmp_path) -> None:
    """``last`` is whoever spoke last (any tenant's text): with keys configured it is never
    shown; the routes need a key like every other, refused in Piper's page shape."""
    config = write_config(tmp_path / "keys.toml",
                          '[tenants.acme]\napi_keys = ["acme-secret-key"]\n')
    key = {"Authorization": "Bearer acme-secret-key"}
    with hostile_server(tmp_path / "upstream") as upstream, \
            serve(tmp_path / "cache", "--upstream", f"piper-http={upstream.url}",
                  config=config) as gateway:
        said = httpx.post(f"{gateway.url}/synthesize", json={"text": "A secret phrase."},
                          headers=key, timeout=30)
        anonymous = [httpx.request(method, f"{gateway.url}{path}", timeout=10, json=body)
                     for method, path, body in (("GET", "/info", None),
                                                ("GET", "/voices", None),
                                                ("POST", "/synthesize", {"text": "Hi."}))]
        info = httpx.get(f"{gateway.url}/info", headers=key, timeout=10)
    assert said.status_code == 200 and said.headers["x-cache"] == "MISS"
    for answer in anonymous:
        assert answer.status_code == 401 and "<title>401 Unauthorized</title>" in answer.text
        assert answer.headers["www-authenticate"] == "Bearer"
    assert info.status_code == 200 and info.json()["last"] is None
    assert "secret" not in info.text
