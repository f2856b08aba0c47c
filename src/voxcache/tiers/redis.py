"""Redis tier: verified entries shared by every node, in one Redis or a Redis Cluster.

Values are the stored files themselves, never pickle; an entry over ``inline_limit`` lives
in S3 and Redis holds a verified *pointer* (``redis_pointers``). Every read is verified; a
bad value is a miss, counted, and removed by compare-and-delete. First writer wins (``SET NX
GET``); expiry by ``PX`` and the envelope. Every call is bounded (timeouts, ≤0.1 s back-off);
failures are ``TierUnavailable`` (a miss). Key names and URL options: ``redis_keys``. Redis ≥ 7.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from redis import Redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.cluster import RedisCluster
from redis.exceptions import (
    OutOfMemoryError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.retry import Retry

from ..entry import CorruptEntry, Entry, decode
from ..errors import InvalidParameter, TierUnavailable
from .base import OK, TierHealth
from .faults import FaultLog
from .redis_keys import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_INLINE_LIMIT,
    DEFAULT_PREFIX,
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT,
    PREFIX,
    RedisKeys,
    parse_url,
)
from .redis_pointers import POINTER_KIND, pointer_blob, pointer_ref, points_to
from .remote import Counters, ObjectRef, ObjectStore, blob_digest, redacted, valid_name

__all__ = ["DEFAULT_CONNECT_TIMEOUT", "DEFAULT_INLINE_LIMIT", "DEFAULT_PREFIX",
           "DEFAULT_RETRIES", "DEFAULT_TIMEOUT", "POINTER_KIND", "RedisKeys", "RedisTier",
           "pointer_blob"]

log = logging.getLogger("voxcache.redis")

_COMPARE_AND_DELETE = """
local value = redis.call('GET', KEYS[1])
if value and redis.sha1hex(value) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


NO_SLOTS = ("the cluster is not ready: no master holds any hash slot yet (a new cluster "
            "whose slots were never assigned?). Create it with `redis-cli --cluster create "
            "HOST:PORT …`; CLUSTER INFO then says cluster_state:ok")
"""What health says for a Redis Cluster whose slot map names no master."""


class RedisTier:
    """Entries in Redis (inline up to ``inline_limit``), larger ones via ``object_store``."""

    name = "redis"
    durable = True

    def __init__(self, connect: Callable[[], Redis | RedisCluster], *, url: str = "redis",
                 prefix: str = DEFAULT_PREFIX, inline_limit: int = DEFAULT_INLINE_LIMIT,
                 object_store: ObjectStore | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if not PREFIX.fullmatch(prefix):
            raise InvalidParameter(
                f"Redis key prefix {prefix!r} is not allowed: use up to 64 letters, digits "
                "and ':_./-' (no braces: they would change the cluster hash slot)")
        if inline_limit < 0:
            raise InvalidParameter(f"inline_limit must be 0 or more bytes, not {inline_limit}")
        self.keys = RedisKeys(prefix)
        self.url = redacted(url)
        self.inline_limit = inline_limit
        self.object_store = object_store
        """Where entries over ``inline_limit`` go (the S3 tier); None: they are not stored."""
        self._connect_fn = connect
        self._client: Redis | RedisCluster | None = None
        self._client_lock = threading.Lock()
        self._clock = clock
        self.counters = Counters()
        self.faults = FaultLog(log, self.counters.count)

    @classmethod
    def from_url(cls, url: str, *, object_store: ObjectStore | None = None,
                 clock: Callable[[], float] = time.time, **options: Any) -> RedisTier:
        """A tier for ``redis://host:port/db``, ``rediss://…`` (TLS) or
        ``redis+cluster://host:port`` (any node of a Redis Cluster; ``rediss+cluster`` with
        TLS). Query parameters (or keyword options, which win) set ``prefix``,
        ``inline_limit``, ``timeout``, ``connect_timeout`` and ``retries``."""
        target, cluster, settings = parse_url(url, options)
        client_options = {
            "socket_timeout": settings.pop("timeout", DEFAULT_TIMEOUT),
            "socket_connect_timeout": settings.pop("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
            "retry": Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.1),
                           settings.pop("retries", DEFAULT_RETRIES)),
        }

        def connect() -> Redis | RedisCluster:
            if cluster:  # a lost shard must not take the other shards' slots down with it
                try:
                    return RedisCluster.from_url(target, require_full_coverage=False,
                                                 **client_options)
                except IndexError:  # redis-py's words for a slot map with no master in it
                    raise RedisClusterException(NO_SLOTS) from None
            return Redis.from_url(target, **client_options)

        return cls(connect, url=url, object_store=object_store, clock=clock, **settings)

    # -- reads ---------------------------------------------------------------------
    def get(self, key: str, kind: str = "audio") -> Entry | None:
        """The verified, unexpired entry (following a pointer to the object tier), or None."""
        if self._refused(key, kind):
            return None
        name = self.keys.entry(key, kind)
        with self._remote("read"):
            try:
                value = self._connection().get(name)
            except ResponseError as exc:
                if not str(exc).startswith("WRONGTYPE"):
                    raise
                self._drop_foreign(name)
                value = None
        entry = (self._verified(name, value, key, kind) if isinstance(value, bytes)
                 else None)  # bytes or None: the client does not decode replies
        self.counters.count("misses" if entry is None else "hits")
        return entry

    def _refused(self, key: str, kind: str) -> bool:
        """True (and counted) for a name voxcache never makes: nothing is sent for it."""
        if valid_name(key, kind) and kind != POINTER_KIND:
            return False
        self.counters.count("refused_names")
        return True

    def _verified(self, name: str, value: bytes, key: str, kind: str) -> Entry | None:
        try:
            entry = decode(value, key)
        except CorruptEntry as exc:
            self._discard(name, value, "corruptions", str(exc))
            return None
        if entry.header.kind == POINTER_KIND:
            return self._follow(name, value, entry, key, kind)
        if entry.header.kind != kind:
            self._discard(name, value, "corruptions",
                          f"holds a {entry.header.kind!r} entry where {kind!r} belongs")
            return None
        if entry.header.expired(self._clock()):
            self.counters.count("expired")
            return None
        return entry

    def _follow(self, name: str, value: bytes, pointer: Entry, key: str,
                kind: str) -> Entry | None:
        """The object a verified pointer names, if it is exactly the one it names."""
        if pointer.header.expired(self._clock()):
            self.counters.count("expired")
            return None
        store = self.object_store
        if store is None:
            self.counters.count("pointers_without_store")
            return None
        try:
            ref = pointer_ref(pointer, kind, store.object_name(key, kind))
        except CorruptEntry as exc:
            self._discard(name, value, "corruptions", str(exc))
            return None
        try:
            target = store.get(key, kind)
        except TierUnavailable as exc:
            self.faults.report("object store", exc, "a pointer's object could not be read; "
                               "treated as a miss")
            return None
        if target is None or target.size != ref.size or blob_digest(target.blob) != ref.digest:
            why = "its object is gone" if target is None else "its object was replaced"
            self._discard(name, value, "stale_pointers", why)
            return None
        self.counters.count("pointer_hits")
        return target

    def contains(self, key: str, kind: str = "audio") -> bool:
        """Whether a value sits under the entry's Redis key (unverified)."""
        if not valid_name(key, kind) or kind == POINTER_KIND:
            return False
        with self._remote("existence check"):
            return bool(self._connection().exists(self.keys.entry(key, kind)))

    # -- writes --------------------------------------------------------------------
    def put(self, entry: Entry, *, tenant: str = "", pinned: bool = False,
            pin_until: float | None = None) -> Entry | None:
        """Store an entry unless a live take of its key is stored (first writer wins); the
        take held afterwards — ``entry`` or the first writer's — or None when it is expired,
        too large with no object tier, or Redis is full. Pins are not kept here: Redis is a
        cache that evicts (``allkeys-lfu``); pins live with the local tiers."""
        key, kind = entry.header.key, entry.header.kind
        value = self._value_of(entry)
        if value is None:
            return None
        name = self.keys.entry(key, kind)
        held = self._store(name, value, key, kind, self._ttl_ms(entry.header.expires))
        if held is None:
            return None
        if held == value and (value is entry.blob or points_to(value, entry)):
            return entry  # our take, inline or in the object tier
        return self._verified(name, held, key, kind)  # the first writer's take

    def replace(self, entry: Entry, *, tenant: str = "") -> bool:
        """Store ``entry`` whatever is stored under its key (aligning this tier with the take
        a deeper tier published)."""
        key, kind = entry.header.key, entry.header.kind
        value = self._value_of(entry, force=True)
        if value is None:
            return False
        with self._remote("write"):
            self._connection().set(self.keys.entry(key, kind), value,
                                   px=self._ttl_ms(entry.header.expires))
        self.counters.count("replaced")
        return True

    def _value_of(self, entry: Entry, force: bool = False) -> bytes | None:
        """What Redis stores for ``entry``: the entry itself, or a pointer to its object (the
        object tier's take of the key, which may be an earlier writer's — unless ``force``);
        None if it cannot be stored here (a name voxcache never makes, expired, too large
        without an object tier)."""
        key, kind = entry.header.key, entry.header.kind
        if self._refused(key, kind):
            return None
        ttl_ms = self._ttl_ms(entry.header.expires)
        if ttl_ms is not None and ttl_ms <= 0:
            return None
        return entry.blob if entry.size <= self.inline_limit else self._pointer_to(entry, force)

    def _pointer_to(self, entry: Entry, force: bool = False) -> bytes | None:
        """Store a large entry in the object tier; the pointer value naming it."""
        store = self.object_store
        if store is None:
            self.counters.count("too_large")
            return None
        try:
            if force:
                ref = None if not store.replace(entry) else ObjectRef(
                    store.object_name(entry.header.key, entry.header.kind), entry.size,
                    blob_digest(entry.blob))
            else:
                ref = store.store(entry)
        except TierUnavailable as exc:
            self.faults.report("object store", exc, "a large take could not be stored in "
                               "the object tier; not shared")
            return None
        return None if ref is None else pointer_blob(entry, ref)

    def _store(self, name: str, value: bytes, key: str, kind: str,
               ttl_ms: int | None) -> bytes | None:
        """``SET NX``: the value held under ``name`` afterwards (``value``, or the first
        writer's live value), or None when Redis is full."""
        client = self._connection()
        with self._remote("write"):
            try:
                try:
                    old = client.set(name, value, nx=True, px=ttl_ms, get=True)
                except ResponseError as exc:
                    if not str(exc).startswith("WRONGTYPE"):
                        raise
                    self._drop_foreign(name)
                    old = client.set(name, value, nx=True, px=ttl_ms, get=True)
            except OutOfMemoryError as exc:
                self.faults.report("full", exc, "Redis is full and does not evict (set "
                                   "maxmemory-policy allkeys-lfu); a take was not shared")
                return None
            if old is None:
                self.counters.count("stores")
                return value
            if not isinstance(old, bytes):  # SET … GET answers bytes (replies not decoded)
                return None
            if self._live(old, key, kind):
                return bytes(old)  # another writer's take of the same key: first writer wins
            self._discard(name, old, "replaced", "an expired or bad value gives way")
            client.set(name, value, nx=True, px=ttl_ms)
        self.counters.count("stores")
        return value

    def _live(self, value: bytes, key: str, kind: str) -> bool:
        """True when ``value`` verifies as an unexpired entry or pointer of key and kind."""
        try:
            header = decode(value, key).header
        except CorruptEntry:
            return False
        return header.kind in (kind, POINTER_KIND) and not header.expired(self._clock())

    def delete(self, key: str, kind: str | None = "audio") -> bool:
        """Remove the entry (every kind when ``kind`` is None) and its object, if any: a
        purged take must not come back through a later pointer to the old object."""
        if not valid_name(key, kind or "audio"):
            return False
        client = self._connection()
        with self._remote("delete"):
            if kind is None:
                names = list(client.scan_iter(match=self.keys.entries(key), count=100))
            else:
                names = [self.keys.entry(key, kind)]
            removed = sum(client.delete(name) for name in names)
        if self.object_store is not None:
            try:
                removed += self.object_store.delete(key, kind)
            except TierUnavailable as exc:
                self.faults.report("object store", exc, "a deleted take's object could not be "
                                   "removed; the bucket's lifecycle rule will")
        return removed > 0

    def _discard(self, name: str, value: bytes, counter: str, reason: str) -> None:
        """Remove ``value`` from ``name`` unless someone replaced it meanwhile; count it."""
        self.counters.count(counter)
        if counter == "corruptions":
            log.warning("redis tier: dropped %s: %s", name, reason)
        try:
            self._connection().eval(_COMPARE_AND_DELETE, 1, name,
                                    hashlib.sha1(value).hexdigest())
        except (RedisError, RedisClusterException) as exc:
            self.faults.report("discard", exc, f"could not remove a bad value at {name}")

    def _drop_foreign(self, name: str) -> None:
        """A hash, list or set sits where an entry belongs (nothing voxcache writes): a miss,
        counted, and removed so the key can be stored again."""
        self.counters.count("corruptions")
        log.warning("redis tier: dropped %s: not a string value", name)
        self._connection().delete(name)

    def _ttl_ms(self, expires: float | None) -> int | None:
        """Milliseconds left before ``expires`` (None: no expiry)."""
        if expires is None:
            return None
        return math.ceil((expires - self._clock()) * 1000)

    # -- the connection ------------------------------------------------------------
    def client(self) -> Redis | RedisCluster:
        """The client, for what shares this Redis with the tier: the render leases and the
        cross-node bus (``tiers.leases``, ``tiers.bus``). ``TierUnavailable`` if it cannot
        be made."""
        return self._connection()

    def _connection(self) -> Redis | RedisCluster:
        """The client, made on first use (a cluster client reads the slot map when made,
        so a cluster that is down at start-up is retried on the next call)."""
        client = self._client
        if client is not None:
            return client
        with self._client_lock:
            if self._client is None:
                with self._remote("connect"):
                    self._client = self._connect_fn()
            return self._client

    @contextlib.contextmanager
    def _remote(self, doing: str) -> Iterator[None]:
        """Translate the client's errors into ``TierUnavailable`` (the stack's miss)."""
        try:
            yield
        except (RedisError, RedisClusterException) as exc:
            self.counters.count("errors")
            raise TierUnavailable(f"redis {self.url}: {doing} failed: "
                                  f"{type(exc).__name__}: {exc}") from exc

    def health(self) -> TierHealth:
        """``ok`` when every node answers PING within the timeouts, ``down`` otherwise."""
        try:
            with self._remote("ping"):
                self._connection().ping()
        except TierUnavailable as exc:
            return TierHealth("down", str(exc))
        return OK

    def stats(self) -> dict[str, Any]:
        """This process's counts (hits, misses, pointer hits, corruptions, errors…); Redis
        itself says how much it holds (``INFO memory``)."""
        return {"url": self.url, "inline_limit": self.inline_limit,
                "counts": self.counters.snapshot()}

    def close(self) -> None:
        """Close the connection pool (a later call would open a new one)."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


