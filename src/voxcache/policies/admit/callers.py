"""Distinct callers per key, counted where every worker and node sees them (``admit_after``).

A line only one caller hears is most likely that caller's own, so a take can wait for N
distinct callers. Counted in the index database's ``callers`` table (every worker) and,
with Redis, a per-key set every node adds to; the count is the larger, so a Redis that is
down stores later, never earlier. Callers are kept only as BLAKE3 hashes; a key's rows go
once its take is stored. docs/operating/admission.md, "Distinct callers".
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

import blake3

from ...cache import Cache

SWEEP_EVERY = 256
"""Writes between sweeps of rows older than the window."""


def caller_hash(identity: str) -> str:
    """What is kept of a caller: a domain-separated BLAKE3 hash (128 bits)."""
    return blake3.blake3(b"voxcache-caller\0" + identity.encode("utf-8", "surrogatepass")
                         ).hexdigest()[:32]


class Callers:
    """Distinct callers of keys that are not stored yet."""

    def __init__(self, cache: Cache, report: Callable[[str, BaseException, str], None],
                 clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self._report = report
        self._clock = clock
        self._writes = 0
        self._redis = cache.nodes.redis_access()

    def count(self, key: str, caller: str | None, window: float) -> int:
        """Record ``caller`` (a hash) as having asked for ``key``; return how many distinct
        callers asked for it within ``window`` seconds (0 when it cannot be told)."""
        local = self._local(key, caller, window)
        remote = self._remote(key, caller, window)
        return max(local, remote)

    def forget(self, key: str) -> None:
        """The key's take is stored: its callers are not needed any more."""
        try:
            with self.cache.index.transaction(0.2) as db:
                db.execute("DELETE FROM callers WHERE key = ?", (key,))
        except sqlite3.Error as exc:
            self._report("callers", exc, "a stored key's callers could not be forgotten "
                         "(swept when the window ends)")
        if self._redis is not None:
            client, name, guard = self._redis
            guard("callers", lambda: client().delete(name(key)), None)

    def _local(self, key: str, caller: str | None, window: float) -> int:
        now = self._clock()
        try:
            with self.cache.index.transaction(0.5) as db:
                if caller is not None:
                    db.execute("INSERT INTO callers VALUES (?, ?, ?) ON CONFLICT(key, caller) "
                               "DO UPDATE SET seen = excluded.seen", (key, caller, now))
                self._writes += 1
                if self._writes % SWEEP_EVERY == 1:
                    db.execute("DELETE FROM callers WHERE seen < ?", (now - window,))
                (found,) = db.execute("SELECT COUNT(*) FROM callers WHERE key = ? AND "
                                      "seen >= ?", (key, now - window)).fetchone()
            return int(found)
        except sqlite3.Error as exc:
            self._report("callers", exc, "distinct callers could not be counted on this "
                         "machine; takes waiting for admit_after are not stored meanwhile")
            return 0

    def _remote(self, key: str, caller: str | None, window: float) -> int:
        if self._redis is None:
            return 0
        client, name, guard = self._redis
        ttl = max(1, int(window))

        def add() -> int:
            pipe: Any = client().pipeline(transaction=True)
            if caller is not None:
                pipe.sadd(name(key), caller)
                pipe.expire(name(key), ttl)
            pipe.scard(name(key))
            return int(pipe.execute()[-1])

        return int(guard("callers", add, 0))
