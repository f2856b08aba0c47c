"""POST hits by memo: from the exact request to what the speech route decided for it.

A speech request's key comes from its body, so a hit would redo validation, voice
lookup and key derivation each time. What the route decides for a body it validated is
a pure function of the body's bytes, the tenant, the few headers that change the answer
and the engine revision, so the route records its decision (``remember``) and answers
the next identical request whose take is in memory with ``answer`` — ``respond.whole``'s
parts, headers and counters, built once per take and format. Anything else goes the
whole way through the route, which stays the reference and fills the memo.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from starlette.types import Send

from ..formats import Format
from ..outcome import Take
from ..resolved import ResolvedRequest
from ..vocabulary import Outcome
from .respond import held_parts, hit_headers, send_parts

HIT = Outcome.HIT.header
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


async def answer(server: Any, memo: SpeechMemo, identity: Identity, send: Send,
                 started: float) -> bool:
    """Answer a remembered request whose take is in memory; False to leave it to the route.

    The answer is what ``respond.whole`` sends for it (the same parts and headers, the
    same counters), with the headers built once per take and format."""
    decision = memo.get(identity)
    cached = server.cached
    if decision is None or decision.resolved.model_revision != cached.engine.model_revision:
        return False
    near = server.cache.recall(decision.key)
    if near is None:
        return False
    entry = near[0]
    cache_key = (decision.key, decision.fmt)
    take = (entry.header.created, entry.header.length)
    known = memo.answers.get(cache_key)
    if known is not None and known.take != take:
        known = None  # built for an earlier take of this key: build it again
    if known is not None and known.prefix is not None:
        parts: tuple[Any, ...] = (*known.prefix, entry.payload)
    else:
        held = held_parts(server, entry, decision.fmt)
        if held is None:
            return False
        parts = held
    result = cached.hit(decision.resolved, decision.key, near, started)
    if known is None:
        # The stored samples (a view of this entry's blob), not an encoding held apart:
        own = getattr(parts[-1], "obj", None) is entry.blob
        prefix = parts[:-1] if own else None
        known = memo.answers[cache_key] = Answer(take, hit_headers(
            Take.whole(result), decision.fmt, sum(len(part) for part in parts)), prefix)
    server.metrics.first_audio(HIT, time.perf_counter() - started)
    await send_parts(send, 200, known.headers, parts)
    server.metrics.request("speech", HIT, 200)
    return True
