"""What several nodes sharing Redis and S3 add to one cache folder.

The shared tiers and their publisher (``tiers.publish``); with Redis, the cross-node bus
(``tiers.bus``) and the render leases (``tiers.leases``) on the Redis tier's client and
breakers; the shared tiers' own counts, folded every ``FOLD_SECONDS`` into the folder's
persisted counters as ``<tier>_<count>``. So the cache itself stays about one folder.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidParameter
from ..vocabulary import TierCount, TierName
from .base import Tier, TierStack
from .bus import Bus, News
from .factory import FORMS
from .faults import FaultLog
from .leases import Leases
from .publish import DEFAULT_MAX_BYTES, Publisher
from .remote import redacted
from .roles import TierRole, with_role

log = logging.getLogger("voxcache.nodes")

LOCAL_TIERS = (TierName.MEMORY.value, TierName.DISK.value)
FOLD_SECONDS = 2.0
LEASE_BACKOFF = 1.0
"""Longest the render leases stay failed open after Redis answers again."""
RedisAccess = tuple[Callable[[], Any], Callable[..., str], Callable[..., Any]]
"""A Redis client factory, a key's record name, and the breaker's guard."""
FOLDED_TOO = {"corruptions": "corruptions"}
"""Shared-tier counts that also go into the folder-wide counter of the same meaning (a
corruption detected in Redis is a corruption: the alert on ``corruptions`` fires)."""


def tier_list(value: str | Iterable[str]) -> tuple[str, ...]:
    """The configured tier list, checked: ``memory`` and ``disk`` first (the tiers of the
    cache folder), then any shared tiers (``redis://…``, ``s3://…``)."""
    from .factory import split_tier_list

    names = split_tier_list(value) if isinstance(value, str) else [str(v).strip() for v in value]
    if tuple(name.lower() for name in names[:2]) != LOCAL_TIERS:
        raise InvalidParameter(
            f"tiers must start with \"memory\", \"disk\" (the cache folder's own), then the "
            f"shared tiers, e.g. [\"memory\", \"disk\", \"redis://host:6379/0\", "
            f"\"s3://bucket/prefix\"]; got {[redacted(n) for n in names]}")
    shared = names[2:]
    local = [name for name in shared if "://" not in name]
    if local:
        raise InvalidParameter(f"tier {local[0]!r} may appear only once, first; shared tiers "
                               f"are written as one of: {', '.join(FORMS[2:])}")
    return (*LOCAL_TIERS, *shared)


def shared_tiers(tiers: Sequence[Tier], *, write_queue: int = DEFAULT_MAX_BYTES,
                 count: Callable[[str, int], None]) -> Publisher | None:
    """The publisher of the shared tiers among ``tiers`` (None: there are none)."""
    shared = with_role(tiers, TierRole.SHARED)
    if not shared:
        return None
    return Publisher(shared, max_bytes=write_queue, count=count)


class Nodes:
    """The shared tiers of one process, and the bus and leases that come with Redis."""

    def __init__(self, publisher: Publisher | None, stack: TierStack, root: Path, *,
                 apply: Callable[[News], None], count: Callable[[str, int], None],
                 faults: FaultLog) -> None:
        self.publisher = publisher
        self.shared: list[Any] = [] if publisher is None else list(publisher.tiers)
        shared = self.shared
        self._count = count
        self.bus: Bus | None = None
        self.leases: Leases | None = None
        self._redis_access: RedisAccess | None = None
        redis = next((tier for tier in shared if tier.name == TierName.REDIS), None)
        if redis is not None:
            inner: Any = redis
            guard = functools.partial(stack.call, redis)
            prefix = inner.keys.prefix
            self._redis_access = (inner.client, lambda key, what="callers":
                                  f"{prefix}{{{key}}}:{what}", guard)
            # the leases under a breaker of their own: back within LEASE_BACKOFF of Redis
            # answering again, whatever the data breaker's back-off
            lease_guard = stack.guard(redis, "leases", LEASE_BACKOFF)
            self.bus = Bus(inner.client, inner.keys.prefix, root, apply=apply, guard=guard,
                           faults=faults, count=count)
            self.leases = Leases(inner.client, inner.keys.lease, guard=lease_guard,
                                 wakeups=self.bus, settle=self.settle, count=count)
        elif shared:
            log.warning("shared tiers without Redis: takes are shared, but one render per key "
                        "and invalidation stop at this machine (add a redis:// tier)")
        self._folded: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._folder: threading.Thread | None = None
        if shared:
            self._folder = threading.Thread(target=self._fold_loop, name="voxcache-fold",
                                            daemon=True)
            self._folder.start()

    def redis_access(self) -> RedisAccess | None:
        """(client, name of a key's record, guard) for the small records kept beside the
        takes in Redis (the distinct callers of a key: ``policies.admit``); None without
        a Redis tier. Every call runs under the Redis tier's breaker (``guard(operation,
        fn, default)``)."""
        return self._redis_access

    def settle(self, key: str, timeout: float) -> bool:
        """Wait until the shared tiers' queued writes of ``key`` are done (the render
        lease's holder calls it before it releases); False if ``timeout`` ran out."""
        return self.publisher is None or self.publisher.wait_for(key, timeout)

    def discard(self, key: str) -> None:
        """Drop queued writes of ``key`` (a delete from another node must not be undone)."""
        if self.publisher is not None:
            self.publisher.discard(key)

    def publish(self, news: list[News]) -> None:
        """Send news to every node (nothing without Redis)."""
        if self.bus is not None:
            self.bus.publish(news)

    def fold(self) -> None:
        """Add what each shared tier counted since the last fold to the persisted counters."""
        for tier in self.shared:
            counts = tier.stats().get("counts", {})
            seen = self._folded.setdefault(tier.name, {})
            for name, value in counts.items():
                delta = int(value) - seen.get(name, 0)
                if delta > 0:
                    self._count(TierCount.FOLDED.of(tier.name, name), delta)
                    if name in FOLDED_TOO:
                        self._count(FOLDED_TOO[name], delta)
                seen[name] = int(value)

    def _fold_loop(self) -> None:
        while not self._stop.wait(FOLD_SECONDS):
            try:
                self.fold()
            except Exception as exc:  # figures only: never worth a thread
                log.warning("shared tiers' counts not folded: %s", exc)

    def health(self) -> dict[str, Any]:
        """The bus's and the leases' state (the tiers' own health is the stack's)."""
        if self.bus is None:
            return {}
        assert self.leases is not None
        return {"bus": self.bus.health(), "leases": {"held": self.leases.held()}}

    def stats(self) -> dict[str, Any]:
        """Each shared tier's figures (its counts, and the publisher's queue)."""
        if self.publisher is None:
            return {}
        queue = self.publisher.stats()
        return {tier.name: {**tier.stats(), "write_queue": queue} for tier in self.shared}

    def close(self) -> None:
        """Pending lease releases first (they wait for writes and announce on the bus),
        then the bus, then the last counts; the stack closes the tiers (draining queues)."""
        if self.leases is not None:
            self.leases.close()
        if self.bus is not None:
            self.bus.close()
        self._stop.set()
        if self._folder is not None:
            self._folder.join(timeout=5)
