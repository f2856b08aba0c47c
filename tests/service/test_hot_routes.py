"""The two hot routes go through the framework, and say what they did in one vocabulary.

``POST /v1/audio/speech`` and ``GET /v1/audio/{key}`` are plain Starlette endpoints first on
the app's router; ``HotRoutes`` hands a request naming one exactly to that same endpoint
(and nothing else), a refusal is counted under its route either way, ``/openapi.json``
still describes both, and the body is read as FastAPI read it (declared JSON, numbers in
strings accepted).
"""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from voxcache.errors import InvalidParameter
from voxcache.service.plain_routes import HotRoutes
from voxcache.vocabulary import MODES, Mode, Outcome, cache_mode


def test_no_middleware_answers_before_the_router(make_app) -> None:
    app, _ = make_app()
    TestClient(app).get("/healthz")  # builds the middleware stack
    assert not any("FastPath" in m.cls.__name__ for m in app.user_middleware)
    first = {route.name: route for route in app.router.routes[:2]}
    assert set(first) == {"speech", "stored_audio"}
    assert first["speech"].methods == {"POST"} and first["stored_audio"].methods >= {"GET"}


def _behind_dispatch(app) -> list[str]:
    """Record each request that ``HotRoutes`` passes on to the rest of the app."""
    node, passed = app.middleware_stack, []
    while not isinstance(node, HotRoutes):
        node = node.app
    rest = node.app

    async def recorder(scope, receive, send) -> None:
        passed.append(f"{scope['method']} {scope['path']}")
        await rest(scope, receive, send)

    node.app = recorder
    return passed


def test_only_a_request_naming_a_hot_route_skips_the_router(make_app) -> None:
    app, _ = make_app()
    client = TestClient(app)
    client.get("/healthz")  # builds the middleware stack
    passed = _behind_dispatch(app)
    key = client.post("/v1/audio/speech", json={"input": "Hi."}).headers["X-Cache-Key"]
    hit = client.post("/v1/audio/speech", json={"input": "Hi."})
    assert hit.headers["X-Cache"] == "HIT"
    stored = client.get(f"/v1/audio/{key}")
    assert stored.headers["X-Cache"] == "HIT" and stored.content[:4] == b"RIFF"
    assert client.head(f"/v1/audio/{key}").status_code == 200
    assert client.get("/v1/audio/not-a-key").json()["error"]["message"] == \
        "no entry 'not-a-key'"
    assert passed == []
    # a literal path is its own routes' (405), a longer path is no key, other methods too
    assert client.get("/v1/audio/speech").status_code == 405
    assert client.get(f"/v1/audio/{key}/more").status_code == 404
    assert client.delete("/v1/audio/speech").status_code == 405
    assert client.get("/healthz").status_code == 200
    assert passed == ["GET /v1/audio/speech", f"GET /v1/audio/{key}/more",
                      "DELETE /v1/audio/speech", "GET /healthz"]


def test_a_refused_hot_request_is_counted_under_its_route(make_app) -> None:
    app, _ = make_app(sections={"tenants": {"a": {"api_keys": ["key-of-tenant-a"]}}})
    client = TestClient(app)
    assert client.get("/v1/audio/" + "5" * 64).status_code == 401
    assert client.post("/v1/audio/speech", json={"input": "hi"}).status_code == 401
    lines = app.state.server.metrics.local.collect()
    seen = {(s.labels.get("route"), s.labels.get("cache"), s.labels.get("code"))
            for family in lines for s in family.samples if s.name == "voxcache_requests_total"}
    assert {("stored_audio", "ERROR", "401"), ("speech", "ERROR", "401")} <= seen


def test_openapi_describes_both_hot_routes(make_app) -> None:
    app, _ = make_app()
    spec = TestClient(app).get("/openapi.json").json()
    speech = spec["paths"]["/v1/audio/speech"]["post"]
    ref = speech["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    assert body["required"] == ["input"] and body["additionalProperties"] is False
    assert {"model", "voice", "response_format", "speed", "cache"} <= set(body["properties"])
    assert "audio/wav" in speech["responses"]["200"]["content"]
    assert "get" in spec["paths"]["/v1/audio/{key}"]


@pytest.mark.parametrize(("content_type", "status"), [
    ("application/json", 200), ("application/json; charset=utf-8", 200),
    ("application/vnd.api+json", 200), ("text/plain", 400), (None, 400)])
def test_the_body_must_be_declared_json(make_app, content_type, status) -> None:
    app, _ = make_app()
    headers = {} if content_type is None else {"Content-Type": content_type}
    r = TestClient(app).post("/v1/audio/speech", content=b'{"input": "Hi.", "speed": "1.5"}',
                             headers=headers)
    assert r.status_code == status, r.text
    if status == 400:
        assert r.json()["error"]["param"] is None


def test_outcomes_have_one_spelling_per_use() -> None:
    assert Outcome.HIT == "hit" and Outcome("stale") is Outcome.STALE
    assert [o.header for o in Outcome] == ["HIT", "MISS", "JOINED", "PARTIAL", "STALE",
                                           "BYPASS"]


def test_one_cache_mode_check_for_header_and_field() -> None:
    assert MODES == ("use", "bypass", "refresh")
    assert cache_mode(None) is Mode.USE and cache_mode(None, "refresh") is Mode.REFRESH
    assert cache_mode("bypass", "refresh") is Mode.BYPASS  # the header wins
    with pytest.raises(InvalidParameter, match="X-Cache-Mode must be one of use, bypass, "
                                               "refresh, got 'often'"):
        cache_mode("often")
    with pytest.raises(InvalidParameter, match="cache mode must be one of"):
        cache_mode(None, "sometimes")


def test_the_routes_are_read_at_startup_not_by_the_first_request(make_app, live,
                                                                  monkeypatch) -> None:
    """Reading the routes makes FastAPI build its route contexts (~60 ms of the event loop
    on 2 cores): done as the server starts, so no request waits behind it."""
    from voxcache.service import methods

    reads: list[int] = []
    real = methods.iter_route_contexts
    monkeypatch.setattr(methods, "iter_route_contexts",
                        lambda routes: reads.append(1) or real(routes))
    app, _ = make_app()
    with live(app) as server:
        at_startup = len(reads)
        answer = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Hi."}, timeout=60)
        assert answer.status_code == 200
        assert httpx.get(f"{server.url}/v1/audio/speech", timeout=60).status_code == 405
    assert at_startup >= 1, "the routes were not read at startup"
    assert len(reads) == at_startup, "a request read the routes"
