"""The one orchestrator: every decision about a request, in the order it is made.

    resolve → key → cache mode → seed policy → tiers → model policy → segments
          → single flight → cross-process lock → render slot → engine → write-through

``CachedEngine`` owns all of it. The policies (``voxcache.policies``) decide what
a request gets behind the narrow ``Pipeline`` interface, which this class
implements; the tiers (``voxcache.cache``) store; the engine renders. One path,
three forms:

- ``synthesize(request)`` → ``Result``: the caller's thread does the work
  (library, CLI, warm); ``stream(request)`` yields the same take chunk by chunk.
- ``await take(request, stream=…)`` → ``Take``: the asyncio form the service uses.
  Memory hits and joins of a render already in flight are answered on the event
  loop; the slower tiers are read in the I/O pool; anything else runs the
  synchronous path in a miss thread (``scheduling.Admission``), where it waits
  for a render slot only if it really renders. So a hit never queues behind a
  miss, and a streamed miss hands each chunk over as the engine yields it, to
  its caller and to every joiner alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, InvalidStateError
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any, Protocol

from .audio import Audio
from .cache import Cache
from .engine import Engine, render_chunks
from .entry import Entry, audio_entry
from .errors import InvalidParameter
from .key import canonical_bytes, digest, key_payload
from .outcome import NO_PROGRESS, Progress, Result, Take, seconds_since
from .policies import segments
from .policies.seeds import SeedPolicy, TakePools, bypass, describe, parse_seed_policy
from .policies.upgrades import Upgrades, parse_model_policy
from .policies.usage import Usage
from .request import DEFAULT_MAX_TEXT_CHARS, SynthesisRequest, resolve
from .resolved import ResolvedRequest
from .scheduling import Admission
from .singleflight import Flight, FlightGroup, key_lock
from .tiers.leases import Leases

__all__ = ["MODES", "CachedEngine", "Observer", "Result", "Take"]

DEFAULT_LOCK_WAIT = 120.0
KEY_MEMO_SIZE = 4096
FOLLOW_POLL = 0.005
"""Seconds between checks of a flight for new chunks on the event loop (bounds the time to
first audio a joiner adds)."""
HANDOFF_SECONDS = 0.0003
"""How long a leader that has just handed its take to waiters gives up the interpreter before
it writes the take through the tiers. Without it the waiting threads, and the event loop
holding the joiners, get the GIL only once the write is done (1-3 ms later); with it they
are answered first, and the write, which nobody but the leader's caller waits for, follows."""
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
                 max_text_chars: int = DEFAULT_MAX_TEXT_CHARS,
                 flights: FlightGroup | None = None, segments: bool = False,
                 seed_policy: str = "pin", model_policy: str = "strict",
                 admission: Admission | None = None, observer: Observer | None = None
                 ) -> None:
        self.engine = engine
        self.cache = cache
        self.lock_wait = lock_wait
        self.max_text_chars = max_text_chars
        self.flights = flights or FlightGroup()
        self.waveform = frozenset(n for n, s in engine.params.items() if s.shapes_waveform)
        self._key_memo: dict[tuple[str, tuple[Any, ...]], tuple[ResolvedRequest, str]] = {}
        self.segments = segments
        """Serve multi-sentence misses from cached sentences (see ``policies.segments``)."""
        if segments:
            _check_segments(engine)
        self.seed_policy = parse_seed_policy(seed_policy)
        self.takes = TakePools()
        self.upgrades = Upgrades(cache.root, model_policy)
        self.usage = Usage(cache.root, self.waveform)
        self.admission = admission or Admission.unbounded()
        self.observer: Observer = observer or _Unobserved()
        self._pending: dict[str, _Shared] = {}
        """Misses started by ``take`` on the event loop, by key: later callers share them
        instead of each filling a place in the admission queue."""

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
            segments.plan(self, resolved))
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
               mode: str, started: float, progress: Progress) -> Result:
        """Every decision, in order: cache mode, seed policy, tiers, then the miss path."""
        if mode == "bypass":
            return bypass(self, resolved, key, started, progress)
        if mode == "refresh":
            self.cache.delete(key)
        elif mode != "use":
            raise InvalidParameter(f"cache mode must be one of {', '.join(MODES)}, got {mode!r}")
        if not self.uses_pin(request, resolved):  # the take pool decides, not take 0 alone
            return self.takes.serve(self, resolved, key, self.seed_policy_for(request),
                                    started, progress)
        found = self.lookup(key)
        if found is not None:
            return self.hit(resolved, key, found, started)
        return self._miss(resolved, key, started, progress)

    def _miss(self, resolved: ResolvedRequest, key: str, started: float,
              progress: Progress) -> Result:
        """A request-key miss: an older model's take (SWR), cached sentences, else the engine."""
        self.asked(resolved, key, hit=False)
        stale = self.upgrades.serve_stale(self, resolved, key, started)
        if stale is not None:
            return stale
        if self.segments:
            result = segments.serve(self, resolved, key, started, progress=progress)
            if result is not None:
                self.remember(resolved, key)
                return result
        return self.render_once(resolved, key, started, progress)

    def stream(self, request: SynthesisRequest) -> Iterator[Audio]:
        """Yield the take for ``request`` chunk by chunk, as soon as each exists (stored
        sentences at once, rendered ones as the engine yields them)."""
        arrivals: queue.Queue[Any] = queue.Queue()
        done = object()

        class Relay:
            def begin(self, cache: str, tier: str, segments: Any = None) -> None:
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

        ``timeout`` bounds each wait (for the take, or for each next chunk); a caller
        that gives up never cancels a render others share.
        """
        started = time.perf_counter()
        resolved_request, key = resolved or await self.aresolve_and_key(request)
        shared = mode == "use" and self.uses_pin(request, resolved_request)
        if shared:
            fast = await self._on_the_loop(resolved_request, key, started, stream, timeout)
            if fast is not None:
                return fast
            pending = self._pending.get(key)  # checked again after the disk read's await
            if pending is not None:
                return await self._join(pending, key, started, stream, timeout)
        channel = _Channel(asyncio.get_running_loop()) if stream else None
        pending = _Shared() if shared else None
        if pending is not None:  # before the miss thread starts: its flight must find it
            self._pending[key] = pending
        try:
            future = self.admission.submit(self._serve, request, resolved_request, key, mode,
                                           started, channel or NO_PROGRESS)
        except BaseException:
            if pending is not None:
                self._forget_pending(key, pending)
            raise
        if pending is not None:
            pending.follow(future)
            future.add_done_callback(lambda _done: self._forget_pending(key, pending))
        if channel is None:
            return Take.whole(await _wait(future, timeout))
        future.add_done_callback(channel.finish)
        return await channel.take(key, self.engine.sample_rate, timeout)

    def _forget_pending(self, key: str, pending: _Shared) -> None:
        if self._pending.get(key) is pending:
            del self._pending[key]

    async def _join(self, pending: _Shared, key: str, started: float, stream: bool,
                    timeout: float | None) -> Take:
        """Share a miss another caller on this loop already started: its flight, once its
        miss thread leads one (streamed), else the take as soon as it exists."""
        self.count("joins")
        if stream:
            while not pending.done():
                flight = self.flights.get(key)
                if flight is not None:
                    flight.add_follower()
                    return Take(key, "JOINED", "engine", self.engine.sample_rate, 1,
                                source=_follow(flight, timeout))
                await asyncio.sleep(FOLLOW_POLL)
        result = await asyncio.wait_for(pending.wait(), timeout)
        return Take.whole(replace(result, cache="joined", seconds=seconds_since(started)))

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
        entry = self.cache.memory.get(key)
        found = (entry, "memory") if entry is not None else (
            await self.admission.read(self.cache.read_below, key))
        if found is None:
            return None
        return Take.whole(self.hit(resolved, key, found, started))

    async def _on_the_loop(self, resolved: ResolvedRequest, key: str, started: float,
                           stream: bool, timeout: float | None) -> Take | None:
        """Memory on the loop, then a render in flight, then the slower tiers in the I/O pool."""
        entry = self.cache.memory.get(key)
        if entry is not None:
            return Take.whole(self.hit(resolved, key, (entry, "memory"), started))
        flight = self.flights.get(key)
        if flight is not None:
            self.count("joins")
            flight.add_follower()
            if stream:
                return Take(key, "JOINED", "engine", self.engine.sample_rate, 1,
                            source=_follow(flight, timeout))
            shared = await _wait(flight.future, timeout)
            return Take.whole(replace(shared, cache="joined", seconds=seconds_since(started)))
        found = await self.admission.read(self.cache.read_below, key)
        if found is not None:  # the tier that answered: disk, redis, s3 (X-Cache-Tier)
            return Take.whole(self.hit(resolved, key, found, started))
        return None

    # -- the pipeline (what policies may use) --------------------------------------------------
    def lookup(self, key: str) -> tuple[Entry, str] | None:
        """(entry, tier) from the fastest tier holding ``key`` (promoted upwards)."""
        return self.cache.get(key)

    def reread(self, key: str) -> Entry | None:
        """A read below the memory tier (after a lock: another process may have stored it)."""
        return self.cache.read_disk(key)

    def lock(self, key: str) -> AbstractContextManager[bool]:
        """The key's lock: across this machine's processes a ``flock`` (failing open on a
        read-only or full folder), then, with a Redis tier, across nodes the key's render
        lease (``_machine_then_nodes``). True: go on (read again, then render); False: the
        wait ran out (render without it)."""
        cache = self.cache
        if cache.leases is None:  # one machine: the flock is the whole lock
            return key_lock(cache.locks, key, self.lock_wait, on_fault=cache.lock_fault)
        return _machine_then_nodes(self, key, cache.leases)

    def render(self, resolved: ResolvedRequest) -> Iterator[Audio]:
        """The engine's chunks, inside a render slot, counted and observed."""
        with self.admission.slot():
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

    def store(self, key: str, audio: Audio, resolved: ResolvedRequest,
              **meta: Any) -> tuple[Entry, bool]:
        """Build the take's entry and write it through every tier: (entry, stored)."""
        entry = self.seal(key, audio, resolved, **meta)
        return entry, self.cache.put(entry, tenant=resolved.tenant)

    def seal(self, key: str, audio: Audio, resolved: ResolvedRequest, **meta: Any) -> Entry:
        """The take's stored form (its envelope), not yet written anywhere."""
        ttl = resolved.ttl if resolved.ttl is not None else self.cache.config.default_ttl
        return audio_entry(key, audio, ttl=ttl, meta={**resolved.describe(), **meta})

    def render_once(self, resolved: ResolvedRequest, key: str, started: float,
                    progress: Progress = NO_PROGRESS) -> Result:
        """Render ``key`` once however many ask: in this process one caller leads the
        key's flight and the rest follow it live; across processes the leader holds the
        key's lock and checks the disk again before it renders."""
        flight, leader = self.flights.join_or_lead(key)
        if not leader:
            return self._follow(flight, resolved, key, started, progress)
        pending = self._pending.get(key)
        if pending is not None:  # callers waiting on the event loop get the take with the rest
            flight.future.add_done_callback(pending.settle)
        try:
            result = self._lead(resolved, key, flight, started, progress)
        except BaseException as exc:
            if not flight.future.done():
                flight.future.set_exception(exc)
            raise
        else:
            if not flight.future.done():
                flight.future.set_result(result)
            return result
        finally:
            self.flights.land(key, flight)

    def _follow(self, flight: Flight, resolved: ResolvedRequest, key: str, started: float,
                progress: Progress) -> Result:
        sent = 0
        try:
            for chunk in flight.follow(self.lock_wait):
                if not sent:
                    progress.begin("joined", "engine")
                progress.chunk(chunk)
                sent += 1
            shared: Result = flight.future.result()
        except TimeoutError:
            if sent:
                raise
            # The leader is stuck; a duplicate render beats a stuck request.
            return self._render(resolved, key, Flight(), started, progress)
        if not sent:  # the leader found another process's take: nothing was published
            progress.begin("joined", shared.tier)
            progress.chunk(shared.entry.audio())
        self.count("joins")
        return replace(shared, cache="joined", seconds=seconds_since(started))

    def _lead(self, resolved: ResolvedRequest, key: str, flight: Flight, started: float,
              progress: Progress) -> Result:
        with self.lock(key) as locked:
            if locked:  # another process or node may have stored it meanwhile
                found = self.cache.read_below(key)
                if found is not None:
                    entry, tier = found
                    self.count("joins")
                    progress.begin("joined", tier)
                    progress.chunk(entry.audio())
                    return Result(entry, key, "joined", tier, seconds_since(started))
            return self._render(resolved, key, flight, started, progress)

    def _render(self, resolved: ResolvedRequest, key: str, flight: Flight, started: float,
                progress: Progress) -> Result:
        render_started = time.perf_counter()
        chunks: list[Audio] = []
        for chunk in self.render(resolved):
            if not chunks:
                progress.begin("miss", "engine")
            chunks.append(chunk)
            flight.publish(chunk)
            progress.chunk(chunk)
        entry = self.seal(key, Audio.join(chunks), resolved,
                          render_seconds=round(seconds_since(render_started), 4))
        # The waiters get the take as soon as it exists, not after the write: what they are
        # given is the take itself, so a write that then fails loses them nothing.
        flight.future.set_result(Result(entry, key, "miss", "engine", seconds_since(started)))
        pending = self._pending.get(key)
        if flight.followers or (pending is not None and pending.joined):
            time.sleep(HANDOFF_SECONDS)  # let the woken waiters run before the write does
        stored = self.cache.put(entry, tenant=resolved.tenant)
        self.remember(resolved, key)
        self.count("misses")
        return Result(entry, key, "miss", "engine", seconds_since(started), stored)

    def hit(self, resolved: ResolvedRequest, key: str, found: tuple[Entry, str],
            started: float) -> Result:
        """A take found in a tier, counted and recorded as a hit."""
        entry, tier = found
        if tier == "memory":  # recency for the disk tier's eviction, which never saw this read
            self.cache.disk.note_hit(key)
        self.count(f"hits_{tier}")
        self.asked(resolved, key, hit=True)
        self.observer.hit(tier, entry)
        return Result(entry, key, "hit", tier, seconds_since(started))

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


class _Shared:
    """A miss started on the event loop and shared by the callers that join it there.

    Its joiners' waits (``wait``) are set in one pass, on one wake-up of the loop, with
    whichever comes first: the key's flight, the moment its take exists
    (before it is written through the tiers), or the whole miss, when it rendered no
    flight of this key (a stored sentence stitch, a stale take, a failure).
    """

    def __init__(self) -> None:
        self._whole: Future[Result] | None = None
        self._first: Future[Result] = Future()
        self._ready = asyncio.wrap_future(self._first)
        self._ready.add_done_callback(self._release)
        self._waiters: list[asyncio.Future[Result]] = []
        self.joined = False
        """Whether any caller besides the one that started the miss waited on it."""

    def follow(self, whole: Future[Result]) -> None:
        """The whole miss, once submitted: it settles the joiners if no flight did."""
        self._whole = whole
        whole.add_done_callback(self.settle)

    def done(self) -> bool:
        """True once the whole miss has ended (the take written, or the miss failed)."""
        return self._whole is not None and self._whole.done()

    def wait(self) -> asyncio.Future[Result]:
        """A future of this caller's own: cancelling it (a client that went away) leaves
        everyone else's wait alone, and all are set in one pass when the take exists."""
        if self._ready.done():
            return self._ready
        waiter = self._ready.get_loop().create_future()
        self._waiters.append(waiter)
        self.joined = True
        return waiter

    def _release(self, ready: asyncio.Future[Result]) -> None:
        exc = ready.exception()
        for waiter in self._waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(ready.result())
                else:
                    waiter.set_exception(exc)
        self._waiters.clear()

    def settle(self, done: Future[Result]) -> None:
        """Pass a finished future's outcome on, unless another already did (any thread)."""
        with contextlib.suppress(InvalidStateError):
            exc = done.exception()
            if exc is None:
                self._first.set_result(done.result())
            else:
                self._first.set_exception(exc)


class _Channel:
    """A streaming caller's ``Progress``, carried from the miss thread onto the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def begin(self, cache: str, tier: str, segments: tuple[int, int] | None = None) -> None:
        self._put(("begin", (cache, tier, segments)))

    def chunk(self, audio: Audio) -> None:
        self._put(("chunk", audio))

    def finish(self, future: Future[Result]) -> None:
        self._put(("done", future))

    def _put(self, item: tuple[str, Any]) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    async def take(self, key: str, sample_rate: int, timeout: float | None) -> Take:
        """The take as soon as the miss says how it is served (or ends without streaming)."""
        kind, value = await asyncio.wait_for(self._queue.get(), timeout)
        if kind == "done":
            return Take.whole(value.result())
        cache, tier, split = value
        return Take(key, cache.upper(), tier, sample_rate, 1, source=self._chunks(timeout),
                    segments=split)

    async def _chunks(self, timeout: float | None) -> AsyncIterator[Audio]:
        while True:
            kind, value = await asyncio.wait_for(self._queue.get(), timeout)
            if kind == "chunk":
                yield value
            elif kind == "done":
                value.result()  # re-raises a render that failed after its first chunk
                return


# -- one render per key across nodes: the composite lock --------------------------------------
@contextlib.contextmanager
def _machine_then_nodes(engine: CachedEngine, key: str, leases: Leases) -> Iterator[bool]:
    """The local ``flock`` first, then the key's lease in Redis (``tiers.leases``), within one
    ``lock_wait``. The flock stays the lock every policy sees (segments take it per
    sentence), and it means one process per machine at most asks Redis for a key. The
    lease yields True also when its holder's take has landed (read it: no render) or Redis
    cannot be asked (fail open: the local lock alone)."""
    cache = engine.cache
    deadline = time.monotonic() + engine.lock_wait
    with key_lock(cache.locks, key, engine.lock_wait, on_fault=cache.lock_fault) as locked:
        if not locked:
            yield locked
            return
        with leases.hold(key, max(0.0, deadline - time.monotonic())) as held:
            yield held


async def _follow(flight: Flight, timeout: float | None) -> AsyncIterator[Audio]:
    """A flight's chunks on the event loop: what exists so far, then live."""
    sent = 0
    deadline = None if timeout is None else time.monotonic() + timeout
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
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError("render did not finish in time")
        await asyncio.sleep(FOLLOW_POLL)


async def _wait(future: Future[Result], timeout: float | None) -> Result:
    """Wait for a shared result; shielded, so a caller that gives up cancels nothing."""
    return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), timeout)


def _check_segments(engine: Engine) -> None:
    segments.check_engine(engine)


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
