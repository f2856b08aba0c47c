"""POST hits without the framework: a memo from the exact request to what the route decided.

``POST /v1/audio/speech`` is how every OpenAI-compatible client asks, and its key
comes from the body, so each hit used to pay for routing, JSON validation and
dependency injection — three quarters of its cost (measured in-process: ~250 µs
of which ~190 µs in FastAPI). But what the route decides for a body it has
validated is a pure function of the request's bytes, the tenant its API key
names, the few headers that change the answer and the engine's revision in force.
So the route records, for each request it validated and could serve by key alone,
its decision (the resolved request, the key, the delivery format); the next
request with the same identity whose take is in the memory tier is answered here,
by the route's own delivery code (``respond.whole``), with the route's headers and
counters. Exact by construction: nothing is re-validated or re-derived here, and
anything else — a body not seen before, a take not in memory, a revision that
moved — goes to the route, which stays the reference (and fills the memo).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..formats import Format
from ..outcome import Take
from ..resolved import ResolvedRequest
from .guard import DEFAULT_TENANT, replay_body, tenant_for
from .respond import held_parts, hit_headers

PATH = "/v1/audio/speech"
MAX_ENTRIES = 4096
MAX_BODY_BYTES = 16 * 1024
"""Only bodies this small are remembered (an OpenAI speech request is a few hundred bytes;
the bound keeps the memo's memory at most ~64 MB)."""
IDENTITY_HEADERS = (b"content-type", b"x-cache-mode", b"x-voxcache-priority")
"""Headers that can change the route's answer besides the API key."""

Identity = tuple[str, bytes, bytes | None, bytes | None, bytes | None]


@dataclass(frozen=True, slots=True)
class Answer:
    """What a memory hit of one take in one format sends besides the stored samples."""

    take: tuple[float, int]
    """The take it was built for (created, length): a key can hold another take later (it
    was deleted, or its TTL ran out, and an unseeded engine rendered it again)."""
    headers: list[tuple[bytes, bytes]]
    prefix: tuple[bytes, ...] | None
    """The parts before the entry's payload (the WAV header, or none for pcm); None when the
    answer is not the payload (an encoded format: ``held_parts`` finds it each time)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """What the route decided for one request identity."""

    resolved: ResolvedRequest
    key: str
    fmt: Format


class SpeechMemo:
    """Request identity → the route's decision, bounded (cleared when full)."""

    def __init__(self) -> None:
        self._items: dict[Identity, Decision] = {}
        self.answers: dict[tuple[str, Format], Answer] = {}
        """A memory hit's raw headers and the parts sent before the stored samples, per take
        and format (they never change: a take's key names its content, so its length and
        its WAV header)."""

    def remember(self, identity: Identity | None, decision: Decision) -> None:
        """Record what the route decided (``identity`` None: not rememberable)."""
        if identity is None:
            return
        if len(self._items) >= MAX_ENTRIES:
            self._items.clear()
            self.answers.clear()
        self._items[identity] = decision

    def get(self, identity: Identity) -> Decision | None:
        """The decision recorded for ``identity``, if any."""
        return self._items.get(identity)

    def __len__(self) -> int:
        return len(self._items)


def identity_of(tenant: str, body: bytes, headers: dict[bytes, bytes]) -> Identity | None:
    """What a request's answer depends on besides the app's configuration."""
    if len(body) > MAX_BODY_BYTES:
        return None
    return (tenant, body, *(headers.get(name) for name in IDENTITY_HEADERS))  # type: ignore[return-value]


class SpeechHitFastPath:
    """Pure ASGI middleware (inside ``BodyLimit``): memory hits of remembered requests."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._seen: tuple[Any, dict[str, str], SpeechMemo, Any] | None = None
        """(app, its API keys, memo, server), read from ``app.state`` once per app: each
        attribute of Starlette's ``State`` is a Python-level lookup (~0.4 µs a hit)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        chunks, message = [], None
        while message is None or message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
        body = b"".join(chunks)
        scope.setdefault("state", {})["voxcache_body"] = body
        if not await self._answer(scope, body, send):
            await self.app(scope, replay_body([body], receive), send)

    def _state(self, app: Any) -> tuple[Any, dict[str, str], SpeechMemo, Any]:
        seen = self._seen
        if seen is None or seen[0] is not app:
            state = app.state
            seen = self._seen = (app, state.options.api_keys, state.speech_memo, state.server)
        return seen

    async def _answer(self, scope: Scope, body: bytes, send: Send) -> bool:
        """Answer a remembered request whose take is in memory; False to leave it to the route.

        The answer is what ``respond.whole`` sends for it (the same parts and headers, the
        same counters), with the headers built once per take and format."""
        started = time.perf_counter()
        _app, keys, memo, server = self._state(scope["app"])
        request_headers = dict(scope["headers"])
        tenant = tenant_for(keys, _auth_headers(request_headers)) if keys else DEFAULT_TENANT
        if tenant is None:
            return False
        identity = identity_of(tenant, body, request_headers)
        decision = None if identity is None else memo.get(identity)
        cached = server.cached
        if decision is None or decision.resolved.model_revision != cached.engine.model_revision:
            return False
        near = server.cache.recall(decision.key)
        if near is None:
            return False
        entry = near[0]
        cache_key = (decision.key, decision.fmt)
        take = (entry.header.created, entry.header.length)
        answer = memo.answers.get(cache_key)
        if answer is not None and answer.take != take:
            answer = None  # built for an earlier take of this key: build it again
        if answer is not None and answer.prefix is not None:
            parts: tuple[Any, ...] | None = (*answer.prefix, entry.payload)
        else:
            parts = held_parts(server, entry, decision.fmt)
            if parts is None:
                return False
        result = cached.hit(decision.resolved, decision.key, near, started)
        if answer is None:
            # The stored samples (a view of this entry's blob), not an encoding held apart:
            own = getattr(parts[-1], "obj", None) is entry.blob
            prefix = parts[:-1] if own else None
            answer = memo.answers[cache_key] = Answer(take, hit_headers(
                Take.whole(result), decision.fmt, sum(len(part) for part in parts)), prefix)
        server.metrics.first_audio("HIT", time.perf_counter() - started)
        await send({"type": "http.response.start", "status": 200, "headers": answer.headers})
        *before, last = parts
        for part in before:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": last, "more_body": False})
        server.metrics.request("speech", "HIT", 200)
        return True


def _auth_headers(headers: dict[bytes, bytes]) -> dict[str, str]:
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in headers.items()
            if name in (b"authorization", b"x-api-key")}


def request_identity(scope: dict[str, Any], tenant: str) -> Identity | None:
    """The identity of the request the route is serving (the fast path kept its body)."""
    body = scope.get("state", {}).get("voxcache_body")
    if body is None:
        return None
    return identity_of(tenant, body, dict(scope["headers"]))

