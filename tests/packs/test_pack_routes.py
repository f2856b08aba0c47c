"""The center's pack routes under attack: keys, bodies and names they never expect.

A real uvicorn server (in a thread) over the tone engine. Every refusal is a 4xx with a
message that says what to fix; a pack is served only by its digest, from the spool.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx
import pytest

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.config import Settings
from voxcache.engines.tone import ToneEngine
from voxcache.errors import InvalidParameter
from voxcache.service import create_app
from voxcache.service.options import service_options

from .standin import Running

TENANT, ADMIN = "tenant-key-0001", "admin-key-0001"


def center(tmp_path: Path, key: Path | str | None) -> tuple[object, Cache]:
    extra = {"tenants": {"shop": {"api_keys": [TENANT]}}, "admin": {"api_keys": [ADMIN]}}
    if key is not None:
        extra["packs"] = {"signing_key": str(key)}
    settings = Settings(cache_dir=tmp_path / "center", engine="tone", extra=extra)
    cache = Cache(settings.cache_dir)
    cached = CachedEngine(ToneEngine(), cache)
    for text in ("One.", "Two.", "Three."):
        cached.synthesize(SynthesisRequest(text, tenant="shop"))
    try:
        return create_app(settings, options=service_options(settings), cached=cached), cache
    except Exception:
        cache.close()
        raise


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_keys_bodies_and_names(tmp_path: Path, keys) -> None:
    app, cache = center(tmp_path, keys[0])
    try:
        with Running(app) as server, httpx.Client(base_url=server.url, timeout=30) as c:
            assert c.get("/v1/packs/identity").status_code == 401
            assert c.get("/v1/packs/identity", headers=auth(TENANT)).json()["tenant"] == "shop"
            assert c.get("/v1/packs/identity", headers=auth(ADMIN)).json()["tenant"] is None

            assert c.post("/v1/packs", json={}).status_code == 401
            assert c.post("/v1/packs", json={}, headers=auth(TENANT)).status_code == 403
            for body in ({"top": 0}, {"base": "../../etc/passwd"}, {"voices": "alto"},
                         {"tenant": "../x"}, {"newer_than": -1}, {"colour": "red"}, [1]):
                refused = c.post("/v1/packs", json=body, headers=auth(ADMIN))
                assert refused.status_code == 400, (body, refused.text)
                assert refused.json()["error"]["message"]

            built = c.post("/v1/packs", json={"tenant": "shop"}, headers=auth(ADMIN))
            assert built.status_code == 201, built.text
            pack = built.json()
            assert pack["entries"] == 3 and built.headers["location"] == pack["url"]
            whole = c.get(pack["url"], headers=auth(ADMIN))
            assert whole.status_code == 200 and len(whole.content) == pack["size"]
            assert whole.headers["etag"] == f'"{pack["digest"]}"'
            assert c.get(pack["url"], headers=auth(TENANT)).status_code == 403
            tail = c.get(pack["url"], headers={**auth(ADMIN), "Range": "bytes=1000-",
                                               "If-Range": f'"{pack["digest"]}"'})
            assert tail.status_code == 206 and tail.content == whole.content[1000:]
            assert c.head(pack["url"], headers=auth(ADMIN)).status_code == 200

            for name in ("0" * 64, "..%2F..%2Fetc%2Fpasswd", pack["digest"][:-1],
                         pack["digest"].upper(), hashlib.sha256(b"x").hexdigest()):
                missing = c.get(f"/v1/packs/{name}", headers=auth(ADMIN))
                assert missing.status_code == 404, (name, missing.text)

            empty = c.post("/v1/packs", json={"tenant": "nobody"}, headers=auth(ADMIN))
            assert empty.status_code == 201 and empty.json()["entries"] == 0
            delta = c.post("/v1/packs", json={"tenant": "shop", "base": pack["snapshot"]},
                           headers=auth(ADMIN)).json()
            assert delta["entries"] == 0 and delta["base"] == pack["snapshot"]
            unknown = c.post("/v1/packs", json={"tenant": "shop", "base": "a" * 64},
                             headers=auth(ADMIN)).json()
            assert unknown["entries"] == 3 and unknown["base_unknown"] is True
    finally:
        cache.close()


def test_publishing_off_or_misconfigured_says_what_to_set(tmp_path: Path) -> None:
    app, cache = center(tmp_path, None)
    try:
        with Running(app) as server:
            refused = httpx.post(server.url + "/v1/packs", json={}, headers=auth(ADMIN), timeout=60)
            assert refused.status_code == 404
            assert "[packs] signing_key" in refused.json()["error"]["message"]
    finally:
        cache.close()
    with pytest.raises(InvalidParameter, match="cannot read key file"):
        center(tmp_path / "other", tmp_path / "no-such.key")
