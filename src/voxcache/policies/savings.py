"""The savings ledger: what the takes served from the cache would have cost the engine.

A hit adds to a dictionary in memory (counting must not slow it); a background thread
folds it every ``FLUSH_SECONDS`` into the index database's ``savings`` table, one row per
hour, tenant and voice, durable and shared by workers. Money is computed when read, at
the configured prices. With Redis each node mirrors its totals into one hash (set, never
added, so a repeated write counts nothing twice). docs/operating/admission.md, "The savings ledger".
"""

from __future__ import annotations

import contextlib
import csv
import io
import socket
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

import blake3

from ..cache import Cache
from .admit.settings import SavingsSettings

FLUSH_SECONDS = 2.0
HOUR = 3600
FIELDS = ("tenant", "voice", "hits", "chars", "seconds", "money")


def bucket_of(when: float) -> int:
    """The hour ``when`` falls in (its start, seconds since 1970)."""
    return int(when) // HOUR * HOUR


class Ledger:
    """This process's additions to the folder's ledger."""

    def __init__(self, cache: Cache, settings: SavingsSettings | None = None, *,
                 flush_interval: float = FLUSH_SECONDS) -> None:
        self.cache = cache
        self.settings = settings or SavingsSettings()
        self.node = node_id(cache)
        self._pending: dict[tuple[int, str, str], list[float]] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = flush_interval
        weakref.finalize(self, _final_flush, cache, self.node, self._pending, self._lock)

    def served(self, tenant: str, voice: str, chars: int, seconds: float) -> None:
        """One take served from the cache (the request path: a dictionary update)."""
        row = (bucket_of(time.time()), tenant, voice)
        with self._lock:
            figures = self._pending.get(row)
            if figures is None:
                figures = self._pending[row] = [0, 0, 0.0]
            figures[0] += 1
            figures[1] += chars
            figures[2] += seconds
        if self._thread is None:
            self._start()

    def flush(self) -> None:
        """Fold what was served since the last flush into the folder's ledger (kept for
        the next flush when the index cannot take it) and mirror it to Redis."""
        with self._lock:
            pending = dict(self._pending)
            self._pending.clear()
        if not pending:
            return
        with self._flush_lock:
            try:
                _write(self.cache, pending)
            except sqlite3.Error as exc:
                self.cache.report_fault("savings", exc, "the savings ledger could not "
                                              "be written; kept for the next flush")
                with self._lock:
                    for row, figures in pending.items():
                        mine = self._pending.setdefault(row, [0, 0, 0.0])
                        for i, value in enumerate(figures):
                            mine[i] += value
                return
            _mirror(self.cache, self.node, list(pending))

    def close(self) -> None:
        """Stop the flusher and write what is pending."""
        self._stop.set()
        self.flush()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=_flush_loop, args=(
                weakref.ref(self), self._stop, self._interval), name="voxcache-savings",
                daemon=True)
        self._thread.start()


def node_id(cache: Cache) -> str:
    """This node's name in the fleet's mirror: its host and cache folder, hashed (stable
    across restarts, distinct for two folders on one machine)."""
    seed = f"{socket.gethostname()}\0{cache.root.resolve()}"
    return blake3.blake3(seed.encode()).hexdigest()[:16]


def _write(cache: Cache, pending: dict[tuple[int, str, str], list[float]]) -> None:
    with cache.index.transaction() as db:
        db.executemany(
            "INSERT INTO savings VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(bucket, tenant, voice) "
            "DO UPDATE SET hits = hits + excluded.hits, chars = chars + excluded.chars, "
            "seconds = seconds + excluded.seconds",
            [(*row, int(f[0]), int(f[1]), float(f[2])) for row, f in pending.items()])


def _mirror(cache: Cache, node: str, rows: list[tuple[int, str, str]]) -> None:
    """Set this node's running totals of ``rows`` in the fleet's Redis hash."""
    access = cache.nodes.redis_access()
    if access is None or not rows:
        return
    client, name, guard = access
    try:
        found = cache.index.query(
            "SELECT bucket, tenant, voice, hits, chars, seconds FROM savings WHERE " + " OR ".join(
                ["(bucket = ? AND tenant = ? AND voice = ?)"] * len(rows)),
            [value for row in rows for value in row], wait=0.2)
    except sqlite3.Error:
        return  # the next flush of these rows mirrors them
    mapping = {_field(node, b, t, v): f"{h},{c},{s!r}" for b, t, v, h, c, s in found}
    guard("savings mirror", lambda: client().hset(name("savings", "ledger"), mapping=mapping),
          None)


def _field(node: str, bucket: int, tenant: str, voice: str) -> str:
    return "\t".join((node, str(bucket), tenant, voice))


def _flush_loop(ref: weakref.ref[Ledger], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        ledger = ref()
        if ledger is None:
            return
        with contextlib.suppress(Exception):  # figures never break serving
            ledger.flush()
        del ledger


def _final_flush(cache: Cache, node: str, pending: dict[tuple[int, str, str], list[float]],
                 lock: threading.Lock) -> None:
    with lock:
        items = dict(pending)
        pending.clear()
    if items:
        with contextlib.suppress(Exception):
            _write(cache, items)
            _mirror(cache, node, list(items))


# -- reading ------------------------------------------------------------------------------
def rows(cache: Cache, since: float | None = None, fleet: bool = False,
         tenant: str | None = None) -> list[tuple[int, str, str, int, int, float]]:
    """(hour, tenant, voice, hits, chars, seconds) from ``since`` on: this folder's, or —
    ``fleet``, with a Redis tier — every node's mirrored rows (this node's from its folder)."""
    start = bucket_of(since) if since is not None else 0
    local = [(int(b), str(t), str(v), int(h), int(c), float(s)) for b, t, v, h, c, s in
             cache.index.query("SELECT bucket, tenant, voice, hits, chars, seconds FROM "
                                    "savings WHERE bucket >= ?", (start,), wait=1.0)]
    if fleet:
        local += _others(cache, start)
    return [row for row in local if tenant is None or row[1] == tenant]


def _others(cache: Cache, start: int) -> list[tuple[int, str, str, int, int, float]]:
    access = cache.nodes.redis_access()
    if access is None:
        return []
    client, name, guard = access
    mine = node_id(cache)
    stored: dict[Any, Any] = guard("savings mirror", lambda: client().hgetall(
        name("savings", "ledger")), {}) or {}
    found = []
    for field, value in stored.items():
        parts = (field.decode() if isinstance(field, bytes) else str(field)).split("\t")
        figures = (value.decode() if isinstance(value, bytes) else str(value)).split(",")
        if len(parts) != 4 or len(figures) != 3 or parts[0] == mine:
            continue
        with contextlib.suppress(ValueError):
            bucket = int(parts[1])
            if bucket >= start:
                found.append((bucket, parts[2], parts[3], int(figures[0]), int(figures[1]),
                              float(figures[2])))
    return found


def totals(found: Iterable[tuple[int, str, str, int, int, float]],
           settings: SavingsSettings) -> list[dict[str, Any]]:
    """Per tenant and voice: hits, characters, engine seconds and their money value."""
    summed: dict[tuple[str, str], list[float]] = {}
    for _bucket, tenant, voice, hits, chars, seconds in found:
        figures = summed.setdefault((tenant, voice), [0, 0, 0.0])
        figures[0] += hits
        figures[1] += chars
        figures[2] += seconds
    return [{"tenant": tenant, "voice": voice, "hits": int(f[0]), "chars": int(f[1]),
             "seconds": round(f[2], 6), "money": round(money(int(f[1]), f[2], settings), 6),
             "currency": settings.currency}
            for (tenant, voice), f in sorted(summed.items())]


def money(chars: int, seconds: float, settings: SavingsSettings) -> float:
    """What ``chars`` characters and ``seconds`` engine seconds cost at the prices set."""
    return chars / 1e6 * settings.price_per_million_chars + \
        seconds * settings.price_per_engine_second


def as_csv(found: list[dict[str, Any]]) -> str:
    """The totals as CSV (a header line, then one row per tenant and voice)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*FIELDS, "currency"], lineterminator="\n")
    writer.writeheader()
    for row in found:
        writer.writerow(row)
    return out.getvalue()
