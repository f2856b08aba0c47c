"""The request path: resolve → key → tiers → single-flight → engine → write-through.

``CachedEngine.synthesize`` reads top-down: a hit returns from the fastest tier;
a miss joins the key's flight (in-process) or leads it, takes the key's
cross-process lock, checks the disk again (another process may have rendered
while we waited), and only then calls the engine, once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from typing import Any

from .audio import Audio
from .cache import Cache
from .engine import Engine, render_chunks
from .entry import Entry, audio_entry
from .key import canonical_bytes, digest, key_payload
from .request import DEFAULT_MAX_TEXT_CHARS, ResolvedRequest, SynthesisRequest, resolve
from .singleflight import Flight, FlightGroup, key_lock
from .takes import SeedPolicy, TakePools, parse_seed_policy
from .upgrades import Aliases, Revalidator, parse_model_policy
from .usage import Usage

DEFAULT_LOCK_WAIT = 120.0
KEY_MEMO_SIZE = 4096


@dataclass(frozen=True, slots=True)
class Result:
    """A take and how it was served."""

    entry: Entry
    key: str
    cache: str
    """``hit``, ``miss``, ``joined`` (another caller's render was shared), ``partial``
    (some sentences cached, the rest rendered), ``stale`` (an older model's take,
    re-rendering in the background) or ``bypass`` (rendered, not stored)."""
    tier: str
    """``memory``, ``disk`` or ``engine``."""
    seconds: float
    stored: bool = True
    """False when the take could not be cached (disk full) and was served anyway."""
    segments_hit: int = 0
    """Segment mode: sentences served from the cache (0 when the request stayed whole)."""
    segments_rendered: int = 0
    """Segment mode: sentences this request had the engine render."""
    take: int | None = None
    """Under a ``variants:N`` seed policy, which of the N takes this is."""

    @property
    def audio(self) -> Audio:
        """The take as canonical PCM."""
        return self.entry.audio()

    @property
    def wav(self) -> bytes:
        """The take as a WAV file (the stored bytes, envelope chunk included)."""
        return self.entry.blob


class CachedEngine:
    """An engine behind the cache: each distinct request is rendered exactly once."""

    def __init__(self, engine: Engine, cache: Cache, *, lock_wait: float = DEFAULT_LOCK_WAIT,
                 max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
                 flights: FlightGroup | None = None, segments: bool = False,
                 seed_policy: str = "pin", model_policy: str = "strict") -> None:
        self.engine = engine
        self.cache = cache
        self.lock_wait = lock_wait
        self.max_text_chars = max_text_chars
        self.flights = flights or FlightGroup()
        self._waveform = frozenset(n for n, s in engine.params.items() if s.shapes_waveform)
        self._key_memo: dict[tuple[str, tuple[Any, ...]], tuple[ResolvedRequest, str]] = {}
        self.segments = segments
        """Serve multi-sentence misses from cached sentences (see ``voxcache.segments``)."""
        if segments:
            from .segments import check_engine

            check_engine(engine)
        self.seed_policy = parse_seed_policy(seed_policy)
        self.model_policy = parse_model_policy(model_policy)
        self.takes = TakePools()
        self.aliases = Aliases(cache.root)
        self.revalidator = Revalidator()
        self.usage = Usage(cache.root, self._waveform)

    # -- keys ----------------------------------------------------------------
    def resolve(self, request: SynthesisRequest) -> ResolvedRequest:
        """Validate and canonicalise a request for this engine."""
        return resolve(request, self.engine, self.max_text_chars)

    def key_of(self, resolved: ResolvedRequest) -> str:
        """Return the content address of a resolved request's audio."""
        return digest(key_payload(resolved, self._waveform))

    def resolve_and_key(self, request: SynthesisRequest) -> tuple[ResolvedRequest, str]:
        """Resolve and key a request, memoised: repeated requests skip both steps.

        Resolution is a pure function of the request and this engine, so a memo keyed
        by the request's fields is exact. It is what keeps a memory hit in the low
        microseconds. Requests with reference audio skip it: hashing the clip is the
        cost, and the fingerprint has its own memo.
        """
        identity = _memo_key(request)
        # the revision in force is part of the memo's key: a gateway that switches its
        # upstream's weights changes it at run time, and every key with it
        memo_key = None if identity is None else (self.engine.model_revision, identity)
        if memo_key is not None:
            known = self._key_memo.get(memo_key)
            if known is not None:
                return known
        resolved = self.resolve(request)
        known = (resolved, self.key_of(resolved))
        if memo_key is not None:
            if len(self._key_memo) >= KEY_MEMO_SIZE:
                self._key_memo.clear()
            self._key_memo[memo_key] = known
        return known

    def explain(self, request: SynthesisRequest) -> dict[str, Any]:
        """Return the canonical payload that is hashed, its bytes and the key."""
        from .segments import plan
        from .takes import describe

        resolved = self.resolve(request)
        payload = key_payload(resolved, self._waveform)
        key = digest(payload)
        policy = self.seed_policy_for(request)
        whole = not self.segments or (resolved.seed is None and policy.mode != "pin")
        segments = None if whole else plan(self, resolved)
        return {"key": key, "payload": payload, "canonical": canonical_bytes(payload).decode(),
                "seed_policy": describe(self, resolved, key, policy),
                "model_policy": self.model_policy,
                "segments": None if segments is None else [
                    {"text": s.resolved.text, "key": s.key} for s in segments]}

    # -- the path ------------------------------------------------------------
    def synthesize(self, request: SynthesisRequest) -> Result:
        """Return the take for ``request``, rendering it only if no tier has it."""
        started = time.perf_counter()
        resolved, key = self.resolve_and_key(request)
        if resolved.seed is None and self.seed_policy_for(request).mode != "pin":
            return self.takes.serve(self, resolved, key, self.seed_policy_for(request), started)
        return self._lookup_then_miss(resolved, key, started)

    async def asynthesize(self, request: SynthesisRequest) -> Result:
        """Asyncio twin: memory hits and joins stay on the loop; the rest runs in a thread."""
        started = time.perf_counter()
        resolved, key = self.resolve_and_key(request)
        if resolved.seed is None and self.seed_policy_for(request).mode != "pin":
            return await asyncio.to_thread(self.synthesize, request)
        entry = self.cache.memory.get(key)
        if entry is not None:
            self.cache.count("hits_memory")
            self.usage.asked(resolved, key, hit=True)
            return Result(entry, key, "hit", "memory", time.perf_counter() - started)
        flight = self.flights.get(key)
        if flight is not None:
            # shield: a waiter that times out must not cancel the render others share
            shared = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(flight.future)),
                                            self.lock_wait)
            self.cache.count("joins")
            return replace(shared, cache="joined", seconds=time.perf_counter() - started)
        return await asyncio.to_thread(self._lookup_then_miss, resolved, key, started)

    def _lookup_then_miss(self, resolved: ResolvedRequest, key: str, started: float) -> Result:
        """The fastest tier holding ``key``, else the miss path."""
        found = self.cache.get(key)
        if found is not None:
            self.cache.count(f"hits_{found[1]}")
            self.usage.asked(resolved, key, hit=True)
            return Result(found[0], key, "hit", found[1], time.perf_counter() - started)
        return self._serve_miss(resolved, key, started)

    def seed_policy_for(self, request: SynthesisRequest) -> SeedPolicy:
        """The request's own seed policy, else this engine's (parsing is memoised)."""
        return parse_seed_policy(request.seed_policy) if request.seed_policy else self.seed_policy

    def _serve_miss(self, resolved: ResolvedRequest, key: str, started: float) -> Result:
        """A request-key miss: an older model's take (SWR), cached sentences, else the engine."""
        from .segments import serve as serve_segments
        from .upgrades import record, serve_stale

        self.usage.asked(resolved, key, hit=False)
        if self.model_policy != "strict":
            stale = serve_stale(self, resolved, key, started)
            if stale is not None:
                return stale
        if self.segments:
            result = serve_segments(self, resolved, key, started)
            if result is not None:
                record(self, resolved, key)
                return result
        return self._miss(resolved, key, started)

    def _miss(self, resolved: ResolvedRequest, key: str, started: float) -> Result:
        flight, leader = self.flights.join_or_lead(key)
        if not leader:
            return self._follow(flight, resolved, key, started)
        return self.lead_flight(resolved, key, flight, started)

    def lead_flight(self, resolved: ResolvedRequest, key: str, flight: Flight,
                    started: float) -> Result:
        """Render a flight this caller leads (from ``flights.join_or_lead``), then land it.

        Public so a server can take the lead on the event loop, answer its own caller
        from ``flight.follow`` like any joiner, and run this in a bounded render pool.
        """
        try:
            result = self._lead(resolved, key, flight, started)
        except BaseException as exc:
            flight.future.set_exception(exc)
            raise
        else:
            flight.future.set_result(result)
            return result
        finally:
            self.flights.land(key, flight)

    def _follow(self, flight: Flight, resolved: ResolvedRequest, key: str,
                started: float) -> Result:
        try:
            shared: Result = flight.future.result(timeout=self.lock_wait)
        except TimeoutError:
            # The leader is stuck; a duplicate render beats a stuck request.
            return self._render(resolved, key, Flight(), started)
        self.cache.count("joins")
        return replace(shared, cache="joined", seconds=time.perf_counter() - started)

    def _lead(self, resolved: ResolvedRequest, key: str, flight: Flight, started: float) -> Result:
        with key_lock(self.cache.root / "locks", key, self.lock_wait,
                      on_fault=self.cache.lock_fault) as locked:
            if locked:
                # Another process may have rendered and stored it while we waited.
                entry = self.cache.read_disk(key)
                if entry is not None:
                    self.cache.count("joins")
                    return Result(entry, key, "joined", "disk", time.perf_counter() - started)
            return self._render(resolved, key, flight, started)

    def _render(self, resolved: ResolvedRequest, key: str, flight: Flight,
                started: float) -> Result:
        render_started = time.perf_counter()
        chunks: list[Audio] = []
        for chunk in render_chunks(self.engine, resolved):
            chunks.append(chunk)
            flight.publish(chunk)
        self.cache.count("syntheses")
        self.cache.count("render_ms", int((time.perf_counter() - render_started) * 1000))
        ttl = resolved.ttl if resolved.ttl is not None else self.cache.config.default_ttl
        meta = {**_meta(resolved),
                "render_seconds": round(time.perf_counter() - render_started, 4)}
        entry = audio_entry(key, Audio.join(chunks), ttl=ttl, meta=meta)
        stored = self.cache.put(entry, tenant=resolved.tenant)
        from .upgrades import record

        record(self, resolved, key)
        self.cache.count("misses")
        return Result(entry, key, "miss", "engine", time.perf_counter() - started, stored)


def _memo_key(request: SynthesisRequest) -> tuple[Any, ...] | None:
    """A hashable identity of a request, or None when it should not be memoised."""
    if request.reference_audio is not None:
        return None
    try:
        params = tuple(sorted((k, type(v), v) for k, v in request.params.items()))
        identity = (request.text, request.voice, request.language, request.instruct,
                    type(request.seed), request.seed, type(request.speed), request.speed,
                    params, request.tenant, request.ttl)
        hash(identity)
    except TypeError:
        return None
    return identity


def _meta(resolved: ResolvedRequest) -> dict[str, Any]:
    """Descriptive fields kept in the envelope (for `ls`, purge by voice, index rebuilds)."""
    return {
        "tenant": resolved.tenant, "engine": resolved.engine_id, "model": resolved.model_revision,
        "voice": resolved.voice or (resolved.reference_fingerprint or "")[:16],
        "text": resolved.text[:200], "language": resolved.language,
    }
