"""Load once: the one path by which the value of a key is made, whoever asks for it.

    look up → join the key's flight, or lead it → the machine lock, then the node lease
            → look again inside the lock → make → admit → publish

Takes, stage artifacts and encoded deliveries load through it, so a key is made once per
machine and, with Redis, once per fleet; a duplicate that loses publication is dropped.
A ``Recipe`` says what a kind of value is made of. docs/internals/design.md, "Load once".
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from .audio import Audio
from .cache import Cache
from .entry import Entry
from .outcome import NO_PROGRESS, Progress
from .singleflight import Flight, FlightGroup, key_lock

T = TypeVar("T")

HANDOFF_SECONDS = 0.0003
"""How long a leader that has just handed its value to waiters gives up the interpreter
before it publishes. Without it the waiting threads, and the event loop holding the
joiners, get the GIL only once the write is done (1-3 ms later)."""
PUBLISH_WAIT = 1.0
"""How long a leader waits for the shared tiers' answer before it stores its take locally
(its callers already have it): with the answer, the folder and memory hold the published
take at once; without it, the publisher adopts the answer when it comes."""


@dataclass(frozen=True, slots=True)
class Made(Generic[T]):
    """What a recipe made: the value, and the entry to publish (None: nothing to store —
    a stale take, a value found by another way)."""

    value: T
    entry: Entry | None = None
    tenant: str = ""


class Recipe(Protocol[T]):
    """What one kind of value needs of the load-once path."""

    def found(self, entry: Entry, tier: str, inside_lock: bool) -> T | None:
        """The value of a stored entry (None: not this caller's, e.g. another tenant's)."""

    def make(self, sink: Progress) -> Made[T]:
        """Make the value, reporting to ``sink`` as it goes."""

    def admit(self, made: Made[T]) -> Made[T]:
        """What may be stored of what was made (the storing gate, ``policies.admit``): ``made``
        itself, or a value with no entry (served to every caller, stored nowhere)."""

    def published(self, made: T, held: Entry | None) -> T:
        """The value once published: ``held`` is the key's take now (None: not stored)."""

    def joined(self, value: T, sink: Progress, replayed: int) -> T:
        """A follower's value; ``sink`` has heard ``replayed`` chunks of the flight."""


class _Tee:
    """Progress for two listeners: the flight (its followers) and the leader's caller."""

    def __init__(self, first: Progress, second: Progress) -> None:
        self._first, self._second = first, second

    def begin(self, cache: str, tier: str, segments: tuple[int, int] | None = None,
              reason: str = "") -> None:
        self._first.begin(cache, tier, segments, reason)
        self._second.begin(cache, tier, segments, reason)

    def chunk(self, audio: Audio) -> None:
        self._first.chunk(audio)
        self._second.chunk(audio)


class Loader:
    """The load-once path over one cache: flights by key, locks, two reads, publication."""

    def __init__(self, cache: Cache, flights: FlightGroup | None = None) -> None:
        self.cache = cache
        self.flights = flights or FlightGroup()

    def read(self, key: str, kind: str, private: bool = False, *,
             below_memory: bool = False) -> tuple[Entry, str] | None:
        """(entry, tier) from the fastest tier holding ``key`` (memory alone for kinds kept
        private to a process; the tiers below memory with ``below_memory``: inside the lock,
        where another process or node may have stored it, memory has nothing new — a take
        published in this process is on disk before it is in memory)."""
        if private:
            return self.cache.recall(key, kind)
        if below_memory:
            return self.cache.read_below(key, kind)
        return self.cache.get(key, kind)

    def load(self, key: str, kind: str, recipe: Recipe[T], *, wait: float,
             looked: bool = False, progress: Progress = NO_PROGRESS,
             private: bool = False) -> tuple[T, str]:
        """The value of ``key`` and how it came: ``hit`` (stored), ``joined`` (another
        caller's flight here), ``found`` (made elsewhere while this caller waited for the
        lock) or ``made`` (here). ``looked``: the caller read the tiers already."""
        if not looked:
            found = self.read(key, kind, private)
            value = None if found is None else recipe.found(*found, inside_lock=False)
            if value is not None:
                return value, "hit"
        flight, leader = self.flights.join_or_lead(key)
        if not leader:
            joined = self.follow(flight, recipe, progress, wait)
            if joined is not None:
                return joined, "joined"
            flight = Flight()  # the leader is stuck: a duplicate render beats a stuck caller
        return self.lead(flight, key, kind, recipe, wait=wait, progress=progress,
                         private=private)

    def follow(self, flight: Flight[T], recipe: Recipe[T], progress: Progress,
               wait: float) -> T | None:
        """A follower's value (its chunks replayed to ``progress`` as they come); None when
        the leader did not finish within ``wait`` and nothing was replayed."""
        published = flight.settled  # joined once it existed: the published value
        sent = 0
        try:
            if not published:  # joined while it was being made: follow it live
                for chunk in flight.follow(wait):
                    if not sent:
                        cache, tier, segments = flight.how or ("", "engine", None)
                        progress.begin("bypass" if flight.reason else "joined", tier,
                                       segments, flight.reason)
                    progress.chunk(chunk)
                    sent += 1
            value = flight.wait(wait, published=published)
        except TimeoutError:
            if sent:
                raise
            return None
        return recipe.joined(value, progress, sent)

    def lead(self, flight: Flight[T], key: str, kind: str, recipe: Recipe[T], *,
             wait: float, progress: Progress = NO_PROGRESS,
             private: bool = False) -> tuple[T, str]:
        """Make ``key``'s value as the leader of ``flight`` (in this thread): lock, read
        again, make, publish; every follower gets it as soon as it exists."""
        try:
            with self.lock(key, wait, private) as locked:
                found = self.read(key, kind, private, below_memory=True) if locked else None
                value = None if found is None else recipe.found(*found, inside_lock=True)
                if value is not None:
                    flight.land(value)
                    return value, "found"
                made = recipe.make(flight if progress is NO_PROGRESS else _Tee(flight,
                                                                                progress))
                made = recipe.admit(made)  # between made and publish: what may be stored
                flight.settle(made.value)
                if made.entry is None:
                    flight.land(made.value)
                    return made.value, "made"
                if flight.followers:
                    time.sleep(HANDOFF_SECONDS)  # let the woken waiters run before the write
                if private:  # a value private to this process lives in its memory alone
                    held = self.cache.in_process.put(made.entry, tenant=made.tenant)
                else:
                    held = self.cache.put(made.entry, tenant=made.tenant, wait=PUBLISH_WAIT)
                value = recipe.published(made.value, held or None)
                flight.land(value)
                return value, "made"
        except BaseException as exc:
            flight.fail(exc)
            raise
        finally:
            self.flights.done(key, flight)

    def lock(self, key: str, wait: float, private: bool = False
             ) -> contextlib.AbstractContextManager[bool]:
        """The key's lock: across this machine's processes a ``flock`` (failing open on a
        read-only or full folder), then, with a Redis tier, across nodes the key's render
        lease. True: go on (read again, then make); False: the wait ran out (make it
        without the lock). A value private to this process needs neither."""
        cache = self.cache
        if private:
            return contextlib.nullcontext(True)
        if cache.leases is None:  # one machine: the flock is the whole lock
            return key_lock(cache.locks, key, wait, on_fault=cache.lock_fault)
        return self._machine_then_nodes(key, wait)

    @contextlib.contextmanager
    def _machine_then_nodes(self, key: str, wait: float) -> Iterator[bool]:
        """The flock, then the lease, within one ``wait``."""
        cache = self.cache
        assert cache.leases is not None
        deadline = time.monotonic() + wait
        with key_lock(cache.locks, key, wait, on_fault=cache.lock_fault) as locked:
            if not locked:
                yield locked
                return
            with cache.leases.hold(key, max(0.0, deadline - time.monotonic())) as held:
                yield held


_LOADERS: weakref.WeakKeyDictionary[Cache, Loader] = weakref.WeakKeyDictionary()
_LOADERS_LOCK = threading.Lock()


def loader_of(cache: Cache) -> Loader:
    """The one load-once path of ``cache`` in this process (its flights are shared by the
    takes, stage artifacts and encodings stored there)."""
    with _LOADERS_LOCK:
        loader = _LOADERS.get(cache)
        if loader is None:
            loader = _LOADERS[cache] = Loader(cache)
        return loader
