"""A method a route does not take is a 405 naming every method the path does take.

``GET /v1/audio/speech`` was a 404 "no entry 'speech'" (the stored-take route took the word
for a key), and ``PUT /tts`` said ``Allow: GET`` though ``POST /tts`` exists. Every route
of the app is tried with every method it does not take, against a real ``voxcache serve``;
what ``Allow`` must say is worked out here from the route table, not by the code checked.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
from fastapi.routing import iter_route_contexts

from tests.packs.nodes import serve
from voxcache.config import Settings
from voxcache.service import create_app
from voxcache.service.options import ServiceOptions

METHODS = ("GET", "POST", "PUT", "DELETE", "PATCH")
SAMPLES = {"key": "a" * 64, "voice_id": "vc_nobody", "pack": "b" * 64, "name": "page.js"}


def route_table(folder: Path) -> list[tuple[str, frozenset[str]]]:
    """(path template, methods) of every HTTP route the service mounts."""
    app = create_app(Settings(cache_dir=folder, engine="tone"),
                     options=ServiceOptions(access_log=False))
    try:
        return [(route.path, frozenset(route.methods))
                for route in iter_route_contexts(app.routes) if route.methods]
    finally:
        app.state.server.cache.close()


def concrete(template: str) -> str:
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: SAMPLES[m.group(1)], template)


def takes(table: list[tuple[str, frozenset[str]]], path: str) -> frozenset[str]:
    """What a path takes: its literal routes' methods when it is one's literal path, else
    every route whose template matches it."""
    literal = [methods for template, methods in table if template == path]
    if literal:
        return frozenset().union(*literal)
    patterns = [(re.fullmatch(re.sub(r"\\\{\w+(?::path)?\\\}", "[^/]+", re.escape(t)), path),
                 methods) for t, methods in table]
    return frozenset().union(*(methods for found, methods in patterns if found))


def test_every_route_answers_405_with_every_method_of_its_path(tmp_path: Path) -> None:
    table = route_table(tmp_path / "table")
    paths = {concrete(template) for template, _ in table} | {"/v1/audio/speech"}
    wrong = []
    with serve(tmp_path / "cache") as node, httpx.Client(base_url=node.url, timeout=60) as client:
        for path in sorted(paths):
            expected = takes(table, path)
            for method in METHODS:
                if method in expected:
                    continue
                answer = client.request(method, path, timeout=10)
                allow = frozenset(m.strip() for m in answer.headers.get("allow", "").split(","))
                if answer.status_code != 405 or allow != expected:
                    wrong.append((method, path, answer.status_code, sorted(allow),
                                  sorted(expected)))
        speech = client.get("/v1/audio/speech")
    assert wrong == []
    assert speech.status_code == 405 and speech.headers["allow"] == "POST"
    assert speech.json()["error"]["message"] == \
        "/v1/audio/speech does not take GET; it takes POST"
