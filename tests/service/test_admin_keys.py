"""Server-wide figures (`/metrics`, `/v1/stats`) need an [admin] key once any key is configured.

The apps are built from config sections through `service_options`, exactly as a config
file is read; a tenant's key is refused there (403): the figures cover every tenant.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from voxcache.config import Settings
from voxcache.errors import InvalidParameter
from voxcache.service.options import service_options

TENANT_KEY = "tenant-acme-key"
ADMIN_KEY = "admin-ops-key-1"
ADMIN_ROUTES = ("/metrics", "/v1/stats")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keyed(make_app) -> TestClient:
    app, _ = make_app(sections={"tenants": {"acme": {"api_keys": [TENANT_KEY]}},
                                "admin": {"api_keys": [ADMIN_KEY]}})
    return TestClient(app)


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_admin_routes_need_an_admin_key(keyed: TestClient, route: str) -> None:
    missing = keyed.get(route)
    assert missing.status_code == 401, missing.text
    assert "admin API key" in missing.json()["error"]["message"]
    assert "[admin] api_keys" in missing.json()["error"]["message"]
    tenant = keyed.get(route, headers=bearer(TENANT_KEY))
    assert tenant.status_code == 403, tenant.text
    assert tenant.json()["error"]["type"] == "permission_error"
    assert "tenant" in tenant.json()["error"]["message"]
    unknown = keyed.get(route, headers={"X-API-Key": "not-a-key-at-all"})
    assert unknown.status_code == 401
    assert keyed.get(route, headers=bearer(ADMIN_KEY)).status_code == 200
    assert keyed.get(route, headers={"X-API-Key": ADMIN_KEY}).status_code == 200


def test_the_admin_key_reads_figures_the_tenant_key_produced(keyed: TestClient) -> None:
    said = keyed.post("/v1/audio/speech", json={"input": "Counted.", "response_format": "wav"},
                      headers=bearer(TENANT_KEY))
    assert said.status_code == 200
    metrics = keyed.get("/metrics", headers=bearer(ADMIN_KEY)).text
    assert 'voxcache_requests_total{cache="MISS",code="200",route="speech"} 1.0' in metrics
    stats = keyed.get("/v1/stats", headers=bearer(ADMIN_KEY)).json()
    assert stats["counters"]["misses"] >= 1


def test_an_admin_key_is_not_a_tenant_key(keyed: TestClient) -> None:
    refused = keyed.post("/v1/audio/speech", json={"input": "hi"}, headers=bearer(ADMIN_KEY))
    assert refused.status_code == 401
    assert "[admin] key" in refused.json()["error"]["message"]
    assert "[tenants.NAME]" in refused.json()["error"]["message"]


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_tenant_keys_alone_close_the_figures_and_say_what_to_configure(make_app,
                                                                       route: str) -> None:
    app, _ = make_app(sections={"tenants": {"acme": {"api_keys": [TENANT_KEY]}}})
    client = TestClient(app)
    for headers in ({}, bearer(TENANT_KEY)):
        refused = client.get(route, headers=headers)
        assert refused.status_code in (401, 403), refused.text
        assert "add [admin] api_keys" in refused.json()["error"]["message"]


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_admin_keys_alone_close_the_figures_but_not_synthesis(make_app, route: str) -> None:
    app, _ = make_app(sections={"admin": {"api_keys": [ADMIN_KEY]}})
    client = TestClient(app)
    assert client.get(route).status_code == 401
    assert client.get(route, headers={"X-API-Key": "some-other-key"}).status_code == 401
    assert client.get(route, headers=bearer(ADMIN_KEY)).status_code == 200
    assert client.post("/v1/audio/speech", json={"input": "Open.", "response_format": "wav"}
                       ).status_code == 200


@pytest.mark.parametrize("route", ADMIN_ROUTES)
def test_with_no_key_configured_the_figures_stay_open(make_app, route: str) -> None:
    app, _ = make_app(sections={})
    assert TestClient(app).get(route).status_code == 200


@pytest.mark.parametrize(("admin", "words"), [
    ({"api_keys": ["short"]}, ["8+ chars"]),
    ({"api_keys": "one-key-not-a-list"}, ["list"]),
    ({"api_keys": [TENANT_KEY]}, ["[tenants.acme]", "its own key"]),
    ({"api_key": [ADMIN_KEY]}, ["api_key", "api_keys"]),
])
def test_bad_admin_sections_are_refused(tmp_path, admin: dict, words: list[str]) -> None:
    settings = Settings(cache_dir=tmp_path / "c", engine="tone",
                        extra={"tenants": {"acme": {"api_keys": [TENANT_KEY]}}, "admin": admin})
    with pytest.raises(InvalidParameter) as refused:
        service_options(settings)
    for word in words:
        assert word in str(refused.value)


def test_admin_keys_are_counted_never_logged(tmp_path) -> None:
    settings = Settings(cache_dir=tmp_path / "c", engine="tone",
                        extra={"admin": {"api_keys": [ADMIN_KEY]}})
    described = service_options(settings).describe()
    assert ADMIN_KEY not in repr(described) and described["admin_keys"] == "1 key(s)"
