"""Streaming from segments: cached leading sentences play while later ones render.

``stream(cached, request)`` yields a take sentence by sentence, in order. A
whole-request hit is one chunk at once. In segment mode the cached sentences
are available immediately and the missing ones arrive as the engine yields
them, so a request whose first sentence is cached starts playing at hit speed,
not render speed. Requests that stay whole stream the engine's chunks through
the request's single flight, so late joiners get what exists so far.

The render runs in a worker thread (the caller only consumes), and the whole
take is stored under the request key when it completes, exactly as
``CachedEngine.synthesize`` would store it.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .audio import Audio
from .errors import EngineError
from .request import SynthesisRequest
from .segments import plan, serve
from .upgrades import record

if TYPE_CHECKING:
    from .cached import CachedEngine

_DONE = object()


def stream(cached: CachedEngine, request: SynthesisRequest) -> Iterator[Audio]:
    """Yield the take for ``request`` sentence by sentence, as soon as each exists."""
    started = time.perf_counter()
    resolved, key = cached.resolve_and_key(request)
    found = cached.cache.get(key)
    if found is not None:
        cached.usage.asked(resolved, key, hit=True)
        yield found[0].audio()
        return
    unpinned = resolved.seed is None and cached.seed_policy_for(request).mode != "pin"
    segments = plan(cached, resolved) if cached.segments and not unpinned else None
    if segments is None:
        yield from _whole(cached, request)
        return
    cached.usage.asked(resolved, key, hit=False)
    arrivals: queue.Queue[Any] = queue.Queue()

    def work() -> None:
        try:
            serve(cached, resolved, key, started, segments,
                  notify=lambda k, a: arrivals.put((k, a)))
            record(cached, resolved, key)
            arrivals.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            arrivals.put(exc)

    threading.Thread(target=work, name="voxcache-segment-stream", daemon=True).start()
    have: dict[str, Audio] = {}
    finished = False
    for seg in segments:
        while seg.key not in have:
            if finished:
                raise EngineError(f"sentence {seg.index} of the request was never produced")
            item = arrivals.get(timeout=cached.lock_wait)
            if item is _DONE:
                finished = True
            elif isinstance(item, BaseException):
                raise item
            else:
                have[item[0]] = item[1]
        yield have[seg.key]


def _whole(cached: CachedEngine, request: SynthesisRequest) -> Iterator[Audio]:
    """A request that stays whole: follow its flight (leading it in a worker if nobody is)."""
    resolved, key = cached.resolve_and_key(request)
    if resolved.seed is None and cached.seed_policy_for(request).mode != "pin":
        yield cached.synthesize(request).audio  # bypass/variants: one chunk
        return
    flight, leader = cached.flights.join_or_lead(key)
    if leader:
        started = time.perf_counter()
        threading.Thread(target=_lead_quietly, args=(cached, resolved, key, flight, started),
                         name="voxcache-stream", daemon=True).start()
    yield from flight.follow(cached.lock_wait)


def _lead_quietly(cached: CachedEngine, resolved: Any, key: str, flight: Any,
                  started: float) -> None:
    try:
        cached.lead_flight(resolved, key, flight, started)
    except BaseException:  # the failure reaches the consumer through flight.follow
        return
