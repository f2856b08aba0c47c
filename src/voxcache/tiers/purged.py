"""Purged keys (tombstones): what was deleted on purpose here, remembered so that no pack
brings it back.

A purge records the key with ``until`` (the later of the purge and the take's creation):
no take of that key created at or before it may be imported again, and a publishing node
ships its tombstones in every pack. Eviction and expiry record nothing. Rows live in the
index (``purged``, ~170 B a key), carried over by a rebuild, never pruned.
docs/operating/edge.md, "Purges and rollback".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .index import Index

_RECORD = ("INSERT INTO purged (key, kind, tenant, until) VALUES (?1, ?2, "
           "coalesce((SELECT tenant FROM entries WHERE key = ?1), ''), ?3) "
           "ON CONFLICT(key) DO UPDATE SET until = max(until, excluded.until)")
_COVERING = ("INSERT INTO purged (key, kind, tenant, until) VALUES (?1, ?2, "
             "coalesce((SELECT tenant FROM entries WHERE key = ?1), ''), "
             "max(?3, coalesce((SELECT created FROM entries WHERE key = ?1), 0))) "
             "ON CONFLICT(key) DO UPDATE SET until = max(until, excluded.until)")


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A purged key: no take of it created at or before ``until`` is stored again."""

    key: str
    kind: str
    until: float

    def covers(self, created: float) -> bool:
        """True when a take created at ``created`` is one this purge removed."""
        return created <= self.until


def record(index: Index, tombstones: Iterable[tuple[str, str, float]], *,
           covering: bool, wait: float | None = None) -> None:
    """Remember (key, kind, until) purges in one transaction (an existing tombstone keeps
    the later ``until``). ``covering``: a purge made here, which also covers the take
    stored under the key now (read from the index before its row goes)."""
    sql = _COVERING if covering else _RECORD
    with index.transaction(wait) as db:
        db.executemany(sql, list(tombstones))


def lookup(index: Index, key: str, wait: float | None = None) -> Tombstone | None:
    """The tombstone of ``key`` here, if it was purged."""
    rows = index.query("SELECT key, kind, until FROM purged WHERE key = ?", (key,), wait)
    return Tombstone(*rows[0]) if rows else None


def listed(index: Index, tenant: str | None = None) -> list[Tombstone]:
    """Every tombstone (of ``tenant`` and of keys whose tenant was unknown, when given),
    in key order: what a pack published from this node carries."""
    where, args = ("tenant IN (?, '')", (tenant,)) if tenant is not None else ("1", ())
    return [Tombstone(*row) for row in index.query(
        f"SELECT key, kind, until FROM purged WHERE {where} ORDER BY key", args)]

