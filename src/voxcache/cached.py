"""The one orchestrator: every decision about a request, in the order it is made.

    resolve → key → cache mode → seed policy → tiers → (load once: flight → lock → tiers
          → model policy → segments → render slot → engine → storing gate → publication)

``CachedEngine`` owns the decisions; the policies (``voxcache.policies``) decide what
a request gets behind the narrow ``Pipeline`` interface, which this class implements;
``voxcache.loading`` makes each key's take once (the same path stage artifacts and
encoded deliveries take); the tiers store. One path, three forms:

- ``synthesize(request)`` → ``Result``: the caller's thread does the work
  (library, CLI, warm); ``stream(request)`` yields the same take chunk by chunk.
- ``await take(request, stream=…)`` → ``Take``: the asyncio form the service uses.
  Memory hits and joins of a flight are answered on the event loop; the slower tiers
  are read in the I/O pool; a miss leads the key's flight from the loop and is made in
  a miss thread (``scheduling.Admission``), which waits for a render slot only if it
  really renders. A hit never queues behind a miss, and a streamed miss hands each
  chunk over as the engine yields it, to its caller and every joiner alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

from .audio import Audio
from .cache import Cache
from .engine import Engine, joined, render_chunks
from .entry import Entry, audio_entry
from .errors import InvalidParameter
from .key import canonical_bytes, digest, key_payload
from .loading import HANDOFF_SECONDS, Loader, Made, loader_of
from .outcome import NO_PROGRESS, Progress, Result, Take, seconds_since
from .policies import clauses, segments
from .policies.admit import Gate, GateSettings
from .policies.savings import Ledger
from .policies.seeds import SeedPolicy, TakePools, bypass, describe, parse_seed_policy
from .policies.segments import parse as parse_segments
from .policies.upgrades import Upgrades, parse_model_policy
from .policies.usage import Usage
from .request import DEFAULT_MAX_TEXT_CHARS, SynthesisRequest, resolve
from .resolved import ResolvedRequest
from .scheduling import Admission
from .singleflight import Flight, FlightGroup
from .vocabulary import TierCount

__all__ = ["HANDOFF_SECONDS", "MODES", "CachedEngine", "Observer", "Result", "Take"]

DEFAULT_LOCK_WAIT = 120.0
KEY_MEMO_SIZE = 4096
MODES = ("use", "bypass", "refresh")
"""Cache modes: ``use`` (default), ``bypass`` (render, neither read nor store),
``refresh`` (drop the stored take, render and store a new one)."""


class Observer(Protocol):
    """Who wants to hear about hits and renders (the service's metrics)."""

    def hit(self, tier: str, entry: Entry) -> None:
        """A take was served from ``tier``."""

    def rendered(self, seconds: float, failed: bool) -> None:
        """The engine ran for ``seconds`` (and failed, or not)."""


class _Unobserved:
    def hit(self, tier: str, entry: Entry) -> None:
        return None

    def rendered(self, seconds: float, failed: bool) -> None:
        return None


class CachedEngine:
    """An engine behind the cache: each distinct request is rendered exactly once."""

    def __init__(self, engine: Engine, cache: Cache, *, lock_wait: float = DEFAULT_LOCK_WAIT,
                 max_text_chars: int = DEFAULT_MAX_TEXT_CHARS, segments: bool | str = False,
                 seed_policy: str = "pin", model_policy: str = "strict",
                 admission: Admission | None = None, observer: Observer | None = None,
                 gate: GateSettings | None = None) -> None:
        self.engine = engine
        self.cache = cache
        self.lock_wait = lock_wait
        self.max_text_chars = max_text_chars
        self.loader: Loader = loader_of(cache)
        """The load-once path (shared with the stage caches and encodings of this cache)."""
        self.waveform = frozenset(n for n, s in engine.params.items() if s.shapes_waveform)
        self._key_memo: dict[tuple[str, tuple[Any, ...]], tuple[ResolvedRequest, str]] = {}
        self.segments = segments_mode = parse_segments(segments)
        """Serve misses from cached sentences (True, ``policies.segments``) or clauses
        (``"clauses"``, ``policies.clauses``)."""
        if segments_mode:
            clauses.check_mode(engine, segments_mode)
        self.seed_policy = parse_seed_policy(seed_policy)
        self.takes = TakePools()
        self.upgrades = Upgrades(cache.root, model_policy)
        self.usage = Usage(cache.root, self.waveform)
        gate = gate or GateSettings()
        self.gate = Gate(gate, cache, speech=engine.speech)
        """What may be stored: text rules, distinct callers, the quality gate."""
        self.savings = Ledger(cache, gate.savings)
        """What the hits saved, per tenant and voice (``policies.savings``)."""
        self.admission = admission or Admission.unbounded()
        self.observer: Observer = observer or _Unobserved()
        self._one_at_a_time = (contextlib.nullcontext() if engine.concurrent_renders
                               else threading.Lock())
        """An engine that declares its renders unsafe to run at once gets one at a time."""

    @property
    def flights(self) -> FlightGroup:
        """The flights in progress, by key."""
        return self.loader.flights

    @property
    def model_policy(self) -> str:
        """``strict`` or ``stale-while-revalidate``."""
        return self.upgrades.policy

    @model_policy.setter
    def model_policy(self, policy: str) -> None:
        self.upgrades.policy = parse_model_policy(policy)

    @property
    def revalidator(self) -> Any:
        """The background re-renders of stale takes (``wait_idle`` is handy in tests)."""
        return self.upgrades.revalidator

    def attach(self, admission: Admission, observer: Observer) -> None:
        """Run under a server's admission control and report to its metrics."""
        self.admission = admission
        self.observer = observer

    # -- keys ----------------------------------------------------------------------------
    def resolve(self, request: SynthesisRequest) -> ResolvedRequest:
        """Validate and canonicalise a request for this engine."""
        return resolve(request, self.engine, self.max_text_chars)

    def key_payload(self, resolved: ResolvedRequest, kind: str = "audio") -> dict[str, Any]:
        """What is hashed into a resolved request's key (what ``explain`` shows)."""
        return key_payload(resolved, self.waveform, kind)

    def key_of(self, resolved: ResolvedRequest) -> str:
        """Return the content address of a resolved request's audio."""
        return digest(key_payload(resolved, self.waveform))

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

    def seed_policy_for(self, request: SynthesisRequest) -> SeedPolicy:
        """The request's own seed policy, else this engine's (parsing is memoised)."""
        return parse_seed_policy(request.seed_policy) if request.seed_policy else self.seed_policy

    def explain(self, request: SynthesisRequest) -> dict[str, Any]:
        """Return the canonical payload that is hashed, its bytes and the key."""
        resolved = self.resolve(request)
        payload = self.key_payload(resolved)
        key = digest(payload)
        policy = self.seed_policy_for(request)
        plan = None if not self.uses_pin(request, resolved) or not self.segments else (
            [p.segment for p in clauses.plan(self, resolved) or []] or None
            if self.segments == segments.CLAUSES else segments.plan(self, resolved))
        return {"key": key, "payload": payload, "canonical": canonical_bytes(payload).decode(),
                "seed_policy": describe(resolved, key, policy),
                "model_policy": self.model_policy,
                "segments": None if plan is None else [
                    {"text": s.resolved.text, "key": s.key} for s in plan]}

    def uses_pin(self, request: SynthesisRequest, resolved: ResolvedRequest) -> bool:
        """True unless an unseeded request falls to a bypass or variants seed policy."""
        return resolved.seed is not None or self.seed_policy_for(request).mode == "pin"

    # -- the path, synchronous ---------------------------------------------------------------
    def synthesize(self, request: SynthesisRequest, *, mode: str = "use",
                   progress: Progress = NO_PROGRESS) -> Result:
        """Return the take for ``request``, rendering it only if no tier has it."""
        started = time.perf_counter()
        resolved, key = self.resolve_and_key(request)
        return self._serve(request, resolved, key, mode, started, progress)

    def _serve(self, request: SynthesisRequest, resolved: ResolvedRequest, key: str,
               mode: str, started: float, progress: Progress,
               led: Flight[Result] | None = None) -> Result:
        """Every decision, in order: cache mode, seed policy, tiers, then the miss path.
        ``led``: the key's flight, led already by an asyncio caller that read every tier."""
        if mode == "bypass":
            return bypass(self, resolved, key, started, progress)
        if mode == "refresh":
            self.cache.delete(key)
        elif mode != "use":
            raise InvalidParameter(f"cache mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not self.uses_pin(request, resolved):  # the take pool decides, not take 0 alone
            return self.takes.serve(self, resolved, key, self.seed_policy_for(request),
                                    started, progress)
        if led is None:
            found = self.lookup(key)
            if found is not None:
                return self.hit(resolved, key, found, started)
        refusal = self.gate.text_refusal(resolved)
        if refusal is None:  # a text the tenant never stores is kept out of usage too
            self.asked(resolved, key, hit=False)
        recipe = _Take(self, resolved, key, started, progress, whole_request=True,
                       caller=request.caller, refusal=refusal)
        if led is not None:
            return self.loader.lead(led, key, "audio", recipe, wait=self.lock_wait)[0]
        return self.loader.load(key, "audio", recipe, wait=self.lock_wait, looked=True,
                                progress=progress)[0]

    def stream(self, request: SynthesisRequest) -> Iterator[Audio]:
        """Yield the take for ``request`` chunk by chunk, as soon as each exists (stored
        sentences at once, rendered ones as the engine yields them)."""
        arrivals: queue.Queue[Any] = queue.Queue()
        done = object()

        class Relay:
            def begin(self, cache: str, tier: str, segments: Any = None,
                      reason: str = "") -> None:
                return None

            def chunk(self, audio: Audio) -> None:
                arrivals.put(audio)

        def work() -> None:
            try:
                arrivals.put((done, self.synthesize(request, progress=Relay())))
            except BaseException as exc:  # handed to the consumer, raised there
                arrivals.put((done, exc))

        threading.Thread(target=work, name="voxcache-stream", daemon=True).start()
        sent = 0
        while True:
            item = arrivals.get(timeout=self.lock_wait)
            if isinstance(item, tuple) and item[0] is done:
                if isinstance(item[1], BaseException):
                    raise item[1]
                if not sent:  # served whole (a hit, a stale take): one chunk
                    yield item[1].audio
                return
            sent += 1
            yield item

    # -- the path, asyncio -----------------------------------------------------------------
    async def take(self, request: SynthesisRequest, *, mode: str = "use", stream: bool = False,
                   timeout: float | None = None,
                   resolved: tuple[ResolvedRequest, str] | None = None) -> Take:
        """The take for ``request``; with ``stream`` a miss returns before its render ends.

        Memory, then a flight of the key, answer on the loop; the slower tiers are read in
        the I/O pool; a miss leads the key's flight from here, so every later caller joins
        it. ``timeout`` bounds each wait (for the take, or for each next chunk); a caller
        that gives up never cancels a render others share.
        """
        started = time.perf_counter()
        resolved_request, key = resolved or await self.aresolve_and_key(request)
        if mode != "use" or not self.uses_pin(request, resolved_request):
            return await self._submit(Flight(), request, resolved_request, key, mode,
                                      started, stream, timeout, channel=True)
        near = self.cache.recall(key)
        if near is not None:
            return Take.whole(self.hit(resolved_request, key, near, started))
        flight = self.flights.get(key)
        if flight is None:  # the slower tiers: disk, redis, s3 (X-Cache-Tier says which)
            found = await self.admission.read(self.cache.read_below, key)
            if found is not None:
                return Take.whole(self.hit(resolved_request, key, found, started))
            flight, leader = self.flights.join_or_lead(key)
            if leader:
                return await self._submit(flight, request, resolved_request, key, mode,
                                          started, stream, timeout, channel=False)
        else:
            flight.add_follower()
        if self.gate.counts_callers and request.caller is not None:
            await self.admission.read(self.gate.joined, key, resolved_request, request.caller)
        return await self._join(flight, key, started, stream, timeout)

    async def _submit(self, flight: Flight[Result], request: SynthesisRequest,
                      resolved: ResolvedRequest, key: str, mode: str, started: float,
                      stream: bool, timeout: float | None, *, channel: bool) -> Take:
        """Run the miss in a miss thread: as the leader of the key's ``flight``, or with
        ``flight`` as a private channel (``channel``: bypass, refresh, take pools)."""
        try:
            if channel:
                future = self.admission.submit(self._serve, request, resolved, key, mode,
                                               started, flight)
            else:
                future = self.admission.submit(self._serve, request, resolved, key, mode,
                                               started, NO_PROGRESS, flight)
        except BaseException as exc:
            flight.fail(exc)
            if not channel:
                self.flights.done(key, flight)
            raise
        future.add_done_callback(lambda done: _finish(flight, done))
        if not stream:
            return Take.whole(await _wait(future, timeout))
        await flight.begun(timeout)
        if flight.how is None:  # served whole without streaming (found, a hit, a failure)
            return Take.whole(await _wait(future, timeout))
        cache, tier, split = flight.how
        return Take(key, cache.upper(), tier, self.engine.sample_rate, 1,
                    source=flight.afollow(timeout, _audio_of, to_landing=True),
                    segments=split, reason=flight.reason)

    async def _join(self, flight: Flight[Result], key: str, started: float, stream: bool,
                    timeout: float | None) -> Take:
        """Share the key's flight: followed live while its take is being made (streamed),
        else its take once it exists — or, once it exists already, once it is published."""
        self.count("joins")
        if stream and not flight.settled:
            await flight.begun(timeout)
            _, tier, split = flight.how or ("", "engine", None)
            return Take(key, "BYPASS" if flight.reason else "JOINED", tier,
                        self.engine.sample_rate, 1, source=flight.afollow(timeout, _audio_of),
                        segments=split, reason=flight.reason)
        result = await flight.await_value(timeout)
        return Take.whole(replace(result, cache=_joined(result),
                                  seconds=seconds_since(started)))

    async def asynthesize(self, request: SynthesisRequest, *, mode: str = "use") -> Result:
        """Asyncio twin of ``synthesize``."""
        take = await self.take(request, mode=mode, timeout=self.lock_wait)
        assert take.result is not None
        return take.result

    async def aresolve_and_key(self, request: SynthesisRequest) -> tuple[ResolvedRequest, str]:
        """``resolve_and_key`` off the loop when a reference clip must be decoded."""
        if request.reference_audio is not None:
            return await self.admission.read(self.resolve_and_key, request)
        return self.resolve_and_key(request)

    async def stored_take(self, resolved: ResolvedRequest) -> Take | None:
        """A stored take of ``resolved``, or None: never renders (a voice kept only as a
        fingerprint, in privacy mode, can be served only from what is stored)."""
        started = time.perf_counter()
        key = self.key_of(resolved)
        found = self.cache.recall(key) or (
            await self.admission.read(self.cache.read_below, key))
        if found is None:
            return None
        return Take.whole(self.hit(resolved, key, found, started))

    # -- the pipeline (what policies may use) --------------------------------------------------
    def lookup(self, key: str) -> tuple[Entry, str] | None:
        """(entry, tier) from the fastest tier holding ``key`` (promoted upwards)."""
        return self.cache.get(key)

    def lock(self, key: str) -> AbstractContextManager[bool]:
        """The key's lock (``Loader.lock``: the machine's flock, then the node lease)."""
        return self.loader.lock(key, self.lock_wait)

    def render(self, resolved: ResolvedRequest) -> Iterator[Audio]:
        """The engine's chunks (sentences, without the join rule's pauses), inside a render
        slot, counted and observed."""
        with self.admission.slot(), self._one_at_a_time:
            started = time.perf_counter()
            try:
                yield from render_chunks(self.engine, resolved)
            except BaseException:
                self.observer.rendered(seconds_since(started), failed=True)
                raise
            seconds = seconds_since(started)
        self.count("syntheses")
        self.count("render_ms", int(seconds * 1000))
        self.observer.rendered(seconds, failed=False)

    def store(self, entry: Entry, resolved: ResolvedRequest) -> tuple[Entry, bool]:
        """Publish a sealed take: (the key's take now — ours, or the one published first
        — and whether it is stored)."""
        held = self.cache.put(entry, tenant=resolved.tenant)
        return (held or entry), bool(held)

    def seal(self, key: str, audio: Audio, resolved: ResolvedRequest, **meta: Any) -> Entry:
        """The take's stored form (its envelope), not yet written anywhere."""
        ttl = resolved.ttl if resolved.ttl is not None else self.cache.config.default_ttl
        return audio_entry(key, audio, ttl=ttl, meta={**resolved.describe(), **meta})

    def render_once(self, resolved: ResolvedRequest, key: str, started: float,
                    progress: Progress = NO_PROGRESS, join: bool = True) -> Result:
        """Render ``key`` once however many ask (the load-once path without the request
        policies: a take of a pool, a re-render of a stale take). ``join=False`` never
        joins a flight in progress (a re-render must not be handed the stale take)."""
        recipe = _Take(self, resolved, key, started, progress, whole_request=False)
        if not join:
            return self.loader.lead(Flight(), key, "audio", recipe, wait=self.lock_wait,
                                    progress=progress)[0]
        return self.loader.load(key, "audio", recipe, wait=self.lock_wait, looked=True,
                                progress=progress)[0]

    def hit(self, resolved: ResolvedRequest, key: str, found: tuple[Entry, str],
            started: float) -> Result:
        """A take found in a tier, counted and recorded as a hit."""
        entry, tier = found
        if tier == self.cache.in_process.name:  # recency for the folder's eviction, which
            self.cache.folder.note_hit(key)     # never saw this read
        self.count(TierCount.HITS.of(tier))
        self.asked(resolved, key, hit=True)
        self.served(resolved, entry)
        self.observer.hit(tier, entry)
        return Result(entry, key, "hit", tier, seconds_since(started))

    def served(self, resolved: ResolvedRequest, entry: Entry) -> None:
        """A stored take served (a hit, or a stored sentence of a stitched take): its
        characters and engine seconds go to the savings ledger."""
        cost = entry.header.meta.get("render_seconds")
        self.savings.served(resolved.tenant, resolved.voice or (
            resolved.reference_fingerprint or "")[:16], len(resolved.text),
            float(cost) if isinstance(cost, int | float) and cost > 0 else 0.0)

    def refusal(self, key: str, resolved: ResolvedRequest, caller: str | None,
                audio: Audio | None = None) -> str | None:
        """Why a take of ``key`` may not be stored (None: it may): the text rules and the
        distinct callers, then — given the take's ``audio`` — the quality gate. A refusal
        is counted (``Gate.refused``)."""
        reason = self.gate.before(key, resolved, caller)
        if reason is None and audio is not None:
            reason = self.gate.quality_refusal(audio, resolved)
        if reason is not None:
            self.gate.refused(key, resolved, reason)
        return reason

    def text_refusal(self, resolved: ResolvedRequest) -> str | None:
        """``admission:<class>`` when the tenant never stores this text (no side effect)."""
        return self.gate.text_refusal(resolved)

    def count(self, name: str, delta: int = 1) -> None:
        """Add to a cache counter."""
        self.cache.count(name, delta)

    def asked(self, resolved: ResolvedRequest, key: str, hit: bool,
              kind: str = "request") -> None:
        """Record one ask of ``key`` in the usage analytics."""
        self.usage.asked(resolved, key, hit, kind)

    def remember(self, resolved: ResolvedRequest, key: str) -> None:
        """Remember ``key`` as the latest take of its request across model revisions."""
        self.upgrades.remember(self, resolved, key)


class _Take:
    """What a take is made of, for the load-once path (``loading.Recipe``): a stored take
    found inside the lock, or — for a whole request — an older model's take
    (stale-while-revalidate) or a stitch of stored sentences, else the engine's render
    under the engine's join rule."""

    def __init__(self, engine: CachedEngine, resolved: ResolvedRequest, key: str,
                 started: float, progress: Progress, *, whole_request: bool,
                 caller: str | None = None, refusal: str | None = None) -> None:
        self.engine = engine
        self.resolved = resolved
        self.key = key
        self.started = started
        self.progress = progress
        self.whole_request = whole_request
        self.caller = caller
        self.refusal = refusal
        """Why the take will not be stored, as known before it exists (a text rule, too
        few callers): it is said in ``begin``, so a stream's headers carry it."""
        self._rendered: Audio | None = None
        """The engine's take made here (the quality gate checks it; a stitch of stored or
        separately checked sentences is not checked again)."""

    def found(self, entry: Entry, tier: str, inside_lock: bool) -> Result | None:
        """A stored take: a hit, or (inside the lock) one another process or node stored
        while this caller waited for it."""
        if not inside_lock:
            return self.engine.hit(self.resolved, self.key, (entry, tier), self.started)
        self.engine.count("joins")
        self.progress.begin("joined", tier)
        self.progress.chunk(entry.audio())
        return Result(entry, self.key, "joined", tier, seconds_since(self.started))

    def make(self, sink: Progress) -> Made[Result]:
        engine, resolved, key = self.engine, self.resolved, self.key
        if self.whole_request:
            stale = engine.upgrades.serve_stale(engine, resolved, key, self.started)
            if stale is not None:
                sink.begin("stale", stale.tier)
                sink.chunk(stale.audio)
                return Made(stale)
        if self.refusal is None:  # inside the lock, for a take that is really made here
            self.refusal = engine.gate.before(key, resolved, self.caller)
        if self.whole_request and engine.segments:
            served = clauses.serve_mode(engine, engine.segments, resolved, key, self.started,
                                        sink, self.refusal, self.caller)
            if served is not None:  # a take with clause joins is not stored whole
                return Made(served[0], served[0].entry if served[1] else None,
                            resolved.tenant)
        return self._render(sink)

    def _render(self, sink: Progress) -> Made[Result]:
        engine, resolved = self.engine, self.resolved
        render_started = time.perf_counter()
        chunks: list[Audio] = []
        for chunk in joined(engine.render(resolved), engine.engine.segment_gap):
            if not chunks:
                sink.begin("bypass" if self.refusal else "miss", "engine",
                           reason=self.refusal or "")
            chunks.append(chunk)
            sink.chunk(chunk)
        self._rendered = Audio.join(chunks)
        entry = engine.seal(self.key, self._rendered, resolved,
                            render_seconds=round(seconds_since(render_started), 4))
        engine.count("misses")
        return Made(Result(entry, self.key, "miss", "engine", seconds_since(self.started)),
                    entry, resolved.tenant)

    def admit(self, made: Made[Result]) -> Made[Result]:
        """The storing gate, between made and publish: a take refused by a text rule, for
        too few callers, because a sentence of it was refused, or by the quality gate
        (rendered once more first, under ``on_fail = "retry"``) is handed to its callers
        with ``stored=False`` and its reason, and published nowhere."""
        if made.entry is None:
            return made
        gate = self.engine.gate
        reason = self.refusal or made.value.reason or None
        if reason is None and self._rendered is not None:
            reason = gate.quality_refusal(self._rendered, self.resolved)
            if reason is not None and gate.retry:
                gate.refused(self.key, self.resolved, reason)
                made = self._render(NO_PROGRESS)  # the same render path, once more
                reason = gate.quality_refusal(self._rendered, self.resolved)
        if reason is None:
            return made
        gate.refused(self.key, self.resolved, reason)
        return Made(replace(made.value, cache="bypass", stored=False, reason=reason,
                            seconds=seconds_since(self.started)), None, made.tenant)

    def published(self, made: Result, held: Entry | None) -> Result:
        self.engine.remember(self.resolved, self.key)
        if held is not None:
            self.engine.gate.stored(self.key, self.resolved)
        return made.published(held or made.entry, held is not None, seconds_since(self.started))

    def joined(self, value: Result, sink: Progress, replayed: int) -> Result:
        self.engine.count("joins")
        self.engine.gate.joined(self.key, self.resolved, self.caller)
        if not replayed:  # it existed before this caller joined: one chunk, whole
            sink.begin(_joined(value), value.tier, reason=value.reason)
            sink.chunk(value.entry.audio())
        return replace(value, cache=_joined(value), seconds=seconds_since(self.started))


def _joined(result: Result) -> str:
    """How a joiner was served: ``joined``, or ``bypass`` when the take is not stored (the
    gate's reason travels with it)."""
    return "bypass" if result.reason else "joined"


def _audio_of(result: Result) -> Audio:
    return result.entry.audio()


def _finish(flight: Flight[Result], done: Future[Result]) -> None:
    """A miss thread ended: its flight (a leader's or a channel) ends with it."""
    exc = done.exception()
    if exc is not None:
        flight.fail(exc)
    else:
        flight.land(done.result())


async def _wait(future: Future[Result], timeout: float | None) -> Result:
    """Wait for a shared result; shielded, so a caller that gives up cancels nothing."""
    return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)


def _memo_key(request: SynthesisRequest) -> tuple[Any, ...] | None:
    """A hashable identity of a request, or None when it should not be memoised."""
    if request.reference_audio is not None or request.voice_tensor is not None:
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
