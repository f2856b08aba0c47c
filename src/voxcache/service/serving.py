"""The request path on the event loop: memory → in-flight → disk → admission → engine.

``CachedEngine.asynthesize`` is the library's path; a server needs two more
things from it, so this module walks the same tiers with the server's pools:
hits never queue behind renders (memory on the loop, disk in the I/O pool,
renders in bounded slots), and a miss can be *streamed* — the leader's render
publishes each sentence to its ``Flight`` and every caller of that key, the
leader's own included, follows the flight: what exists so far, then live.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from ..audio import Audio
from ..cached import CachedEngine
from ..entry import Entry
from ..errors import EngineError, VoxcacheError
from ..request import ResolvedRequest, SynthesisRequest
from ..singleflight import Flight
from .admission import INTERACTIVE, Admission
from .metrics import Metrics

T = TypeVar("T")
FOLLOW_POLL = 0.005
"""Seconds between checks of a flight for new chunks (bounds added time-to-first-audio)."""

MODES = ("use", "bypass", "refresh")
"""Cache modes: ``use`` (default), ``bypass`` (render, neither read nor store),
``refresh`` (drop the stored take, render and store a new one)."""


@dataclass(slots=True)
class Take:
    """A served request: how it was served and its audio (whole, or as a chunk stream)."""

    key: str
    cache: str
    """HIT, MISS, JOINED, PARTIAL, STALE or BYPASS (the X-Cache header)."""
    tier: str
    sample_rate: int
    channels: int
    entry: Entry | None = None
    flight: Flight | None = None
    """Set for a streamed miss or join: chunks are read from it as they arrive."""
    segments: tuple[int, int] | None = None
    """Segment mode: (sentences from the cache, sentences rendered) for this request."""
    sentences: AsyncIterator[Audio] | None = None
    """Set for a streamed segment-mode request: its sentences in order, as each exists."""

    @property
    def streaming(self) -> bool:
        """True when the audio arrives over time (a render in flight or sentence by sentence)."""
        return self.flight is not None or self.sentences is not None

    async def chunks(self, timeout: float) -> AsyncIterator[Audio]:
        """Yield the take's audio: stored at once, or a flight's chunks as they are rendered."""
        if self.sentences is not None:
            async for sentence in self.sentences:
                yield sentence
            return
        if self.flight is None:
            assert self.entry is not None
            yield self.entry.audio()
            return
        flight, sent = self.flight, 0
        deadline = time.monotonic() + timeout
        while True:
            available = len(flight.chunks)
            if sent < available:
                for chunk in flight.chunks[sent:available]:
                    yield chunk
                sent = available
                continue
            if flight.future.done():
                if len(flight.chunks) > sent:
                    continue
                result = flight.future.result()  # re-raises the leader's failure
                if sent == 0:  # rendered by another process: nothing was published here
                    yield result.entry.audio()
                return
            if time.monotonic() > deadline:
                raise TimeoutError("render did not finish in time")
            await asyncio.sleep(FOLLOW_POLL)


RENDER_PRIORITY: ContextVar[int] = ContextVar("voxcache_render_priority", default=INTERACTIVE)
"""The priority of the renders this request starts (``guard.render_priority`` sets it)."""


class Server:
    """One engine behind the cache, with the pools and counters of a server process."""

    def __init__(self, cached: CachedEngine, admission: Admission, metrics: Metrics,
                 timeout: float, multi_tenant: bool = False) -> None:
        self.cached = cached
        self.multi_tenant = multi_tenant
        """API keys are configured: stored takes are tenant-checked through the index."""
        self.cache = cached.cache
        self.admission = admission
        self.metrics = metrics
        self.timeout = timeout
        self._library_calls: dict[str, asyncio.Future[Any]] = {}

    async def resolve(self, request: SynthesisRequest) -> tuple[ResolvedRequest, str]:
        """Canonicalise and key a request (a reference clip is decoded off the loop)."""
        if request.reference_audio is not None:
            return await self.admission.read(self.cached.resolve_and_key, request)
        return self.cached.resolve_and_key(request)

    async def take(self, resolved: ResolvedRequest, key: str, mode: str = "use",
                   stream: bool = False, request: SynthesisRequest | None = None) -> Take:
        """Find or render the take; with ``stream`` a miss returns before its render ends."""
        rate, channels = self.cached.engine.sample_rate, 1
        if mode == "bypass":
            entry = await self._bypass(resolved, key)
            return Take(key, "BYPASS", "engine", rate, channels, entry=entry)
        if mode == "refresh":
            await self.admission.read(self.cache.delete, key)
        else:
            path = self._library_reason(resolved, request) if request is not None else None
            if path == "takes":  # variants/bypass: the pool decides, not the stored take 0
                return await self._library(request, key, resolved, path)  # type: ignore[arg-type]
            found = await self.lookup(key)
            usage = self.cached.usage  # what `warm --from-top-misses` reads
            if found is not None:
                usage.asked(resolved, key, hit=True)
                return found
            if path == "segments" and stream:
                take = await self._stream_segments(resolved, key)
                if take is not None:
                    return take
            if path == "policy" or (path == "segments" and (
                    key in self._library_calls or not (stream or self.cached.flights.get(key)))):
                return await self._library(request, key, resolved, path)  # type: ignore[arg-type]
            # Left here: no segment mode, a request that stays whole (one sentence, or a split
            # that cannot be verified), or a streamed join of a whole render in flight.
            usage.asked(resolved, key, hit=False)
        flight, leader = self.cached.flights.join_or_lead(key)
        if leader:
            self._lead(resolved, key, flight)
            status = "MISS"
        else:
            status = "JOINED"
            self.cache.count("joins")
        if stream:
            return Take(key, status, "engine", rate, channels, flight=flight)
        # shield: a caller that times out (or goes away) must not cancel the shared flight
        result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(flight.future)),
                                        self.timeout)
        if leader and result.cache == "joined":  # another process rendered it meanwhile
            status = "JOINED"
        return Take(key, status, result.tier if status == "JOINED" else "engine",
                    result.entry.header.sample_rate, result.entry.header.channels,
                    entry=result.entry)

    async def lookup(self, key: str) -> Take | None:
        """Memory on the loop, then a render in flight, then disk in the I/O pool."""
        entry = self.cache.memory.get(key)
        tier = "memory"
        if entry is None:
            flight = self.cached.flights.get(key)
            if flight is not None:
                return None  # join it (and stream it) below
            entry = await self.admission.read(self.cache.read_disk, key)
            if entry is None:
                return None
            tier = "disk"
        self.cache.count(f"hits_{tier}")
        self.metrics.hit(tier, entry)
        header = entry.header
        return Take(key, "HIT", tier, header.sample_rate, header.channels, entry=entry)

    async def stored(self, key: str, tenant: str) -> tuple[Entry, str] | None:
        """A stored take by key, only if ``tenant`` owns it (``Cache.get_owned``: another
        tenant's key costs what an absent one costs and counts nothing for its owner).
        The owner's memory hit stays on the loop; everything else runs in the I/O pool."""
        check_index = self.multi_tenant
        held = self.cache.memory.peek(key)
        if held is not None and held.header.meta.get("tenant", "default") == tenant:
            return self.cache.get_owned(key, tenant, check_index=check_index)
        return await self.admission.read(
            lambda: self.cache.get_owned(key, tenant, check_index=check_index))

    def _library_reason(self, resolved: ResolvedRequest,
                        request: SynthesisRequest) -> str | None:
        """Which ``CachedEngine`` feature must decide this request, if any: ``takes`` (an
        unseeded request under variants/bypass — the request's policy or the server's —,
        decided before any lookup), ``policy`` (stale serving of a miss), or ``segments``."""
        cached = self.cached
        if resolved.seed is None and cached.seed_policy_for(request).mode != "pin":
            return "takes"
        if cached.model_policy != "strict":
            return "policy"
        return "segments" if cached.segments else None

    async def _library(self, request: SynthesisRequest, key: str, resolved: ResolvedRequest,
                       reason: str) -> Take:
        """A miss served by ``CachedEngine.synthesize`` (whole, not streamed).

        Concurrent callers of one key share one call (``JOINED``): without it each would
        take a render slot just to wait on the library's per-segment flights.
        """
        pending = self._library_calls.get(key)
        joined = pending is not None
        if pending is None:
            pending = asyncio.ensure_future(self._run_library(request, resolved, reason))
            self._library_calls[key] = pending
            pending.add_done_callback(lambda _: self._library_calls.pop(key, None))
        else:
            self.cache.count("joins")
        result = await asyncio.wait_for(asyncio.shield(pending), self.timeout)
        header = result.entry.header
        status = "JOINED" if joined else result.cache.upper()  # MISS, PARTIAL, STALE, HIT…
        split = result.segments_hit + result.segments_rendered
        return Take(result.key, status, result.tier, header.sample_rate, header.channels,
                    entry=result.entry,
                    segments=(result.segments_hit, result.segments_rendered) if split else None)

    async def _run_library(self, request: SynthesisRequest, resolved: ResolvedRequest,
                           reason: str) -> Any:
        """Stitching stored sentences is a hit, so it runs in the I/O pool, not a render slot."""
        if reason == "segments" and await self.admission.read(self._segments_stored, resolved):
            return await asyncio.wrap_future(self.admission.io.submit(self.cached.synthesize,
                                                                      request))
        started = time.perf_counter()
        future = self._submit(self.cached.synthesize, request)
        future.add_done_callback(lambda f: self._rendered(f.exception(), started))
        return await asyncio.wrap_future(future)

    async def _stream_segments(self, resolved: ResolvedRequest, key: str) -> Take | None:
        """Stream a segment-mode miss: stored sentences at once, the rest as they render.

        The stored ones are read in the I/O pool before anything waits for a render slot,
        so a request whose first sentence is cached starts playing at hit speed. The
        missing ones render in an admission slot (``segments.serve``, which also stores the
        whole take under the request key); each sentence reaches the listener as it lands.
        """
        from ..segments import plan, serve

        segments = await self.admission.read(plan, self.cached, resolved)
        if segments is None:
            return None
        stored = await self.admission.read(self._stored_sentences, segments)
        hits = sum(1 for seg in segments if seg.key in stored)
        loop = asyncio.get_running_loop()
        arrivals: asyncio.Queue[Any] = asyncio.Queue()

        def notify(segment_key: str, audio: Audio) -> None:
            loop.call_soon_threadsafe(arrivals.put_nowait, (segment_key, audio))

        started = time.perf_counter()
        if hits == len(segments):  # stitching stored sentences is a hit: the I/O pool
            done = self.admission.io.submit(serve, self.cached, resolved, key, started, segments)
        else:
            done = self._submit(serve, self.cached, resolved, key, started,
                                                segments, notify)
            done.add_done_callback(lambda f: self._rendered(f.exception(), started))
        done.add_done_callback(lambda f: loop.call_soon_threadsafe(arrivals.put_nowait, f))

        async def in_order() -> AsyncIterator[Audio]:
            have, finished = dict(stored), False
            for seg in segments:
                while seg.key not in have:
                    if finished:
                        raise EngineError(f"sentence {seg.index} was never produced")
                    item = await asyncio.wait_for(arrivals.get(), self.timeout)
                    if isinstance(item, tuple):
                        have[item[0]] = item[1]
                    else:
                        finished = True
                        item.result()  # re-raise a failed render
                yield have[seg.key]

        status = "HIT" if hits == len(segments) else "PARTIAL" if hits else "MISS"
        return Take(key, status, "segments" if status == "HIT" else "engine",
                    self.cached.engine.sample_rate, 1, segments=(hits, len(segments) - hits),
                    sentences=in_order())

    def _stored_sentences(self, segments: list[Any]) -> dict[str, Audio]:
        """The sentences of a request that some tier already holds."""
        found = {}
        for seg in segments:
            hit = self.cache.get(seg.key)
            if hit is not None:
                found[seg.key] = hit[0].audio()
        return found

    def _segments_stored(self, resolved: ResolvedRequest) -> bool:
        """True when every sentence of a multi-sentence request is stored (no render needed)."""
        from ..segments import plan

        segments = plan(self.cached, resolved)
        return segments is not None and all(
            self.cache.memory.get(seg.key) is not None or self.cache.disk.path_of(seg.key).exists()
            for seg in segments)

    def _lead(self, resolved: ResolvedRequest, key: str, flight: Flight) -> None:
        """Start the render in a slot; a refusal lands the flight so joiners see it too."""
        started = time.perf_counter()
        try:
            future = self._submit(self.cached.lead_flight, resolved, key,
                                                  flight, started)
        except VoxcacheError as exc:
            flight.future.set_exception(exc)
            self.cached.flights.land(key, flight)
            raise
        future.add_done_callback(lambda f: self._rendered(f.exception(), started))

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue a render at this request's priority (warm-up jobs go last)."""
        return self.admission.submit_render(fn, *args, priority=RENDER_PRIORITY.get())

    def _rendered(self, failure: BaseException | None, started: float) -> None:
        seconds = time.perf_counter() - started
        self.admission.record_render(seconds)
        self.metrics.rendered(seconds, failed=failure is not None)

    async def _bypass(self, resolved: ResolvedRequest, key: str) -> Entry:
        """Render without reading or writing the cache (still inside admission control)."""
        from ..takes import bypass

        started = time.perf_counter()
        future = self._submit(bypass, self.cached, resolved, key, started)
        future.add_done_callback(lambda f: self._rendered(f.exception(), started))
        result = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)),
                                        self.timeout)
        return result.entry
