"""Analytics that steer warming: how often each request and sentence is asked and missed.

Counting must not slow a hit, so the request path only bumps an in-memory
counter; a background thread (and ``flush``/exit) folds the counts into a
table of the cache folder's index database, ``usage``. Both are bounded:
the buffer by ``max_pending`` keys (new keys beyond it are dropped until the
next flush) and the table by ``max_rows`` (the least-asked, least-recent rows
go first). Each row keeps the canonical key payload, which is what lets
``warm --from-top-misses`` and ``rerender`` rebuild the request later.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
import weakref
from dataclasses import replace
from typing import Any

from ..key import key_payload
from ..request import SynthesisRequest
from ..resolved import ResolvedRequest
from ..tiers.index import Index

USAGE_WAIT = 5.0
"""Seconds a background fold waits for another process's write lock."""


class Usage:
    """Bounded ask/miss counters per request key and per segment key."""

    def __init__(self, index: Index, waveform: frozenset[str], *, max_rows: int = 100_000,
                 max_pending: int = 20_000, flush_interval: float = 2.0) -> None:
        self.index = index
        self.max_rows = max_rows
        self.max_pending = max_pending
        self._waveform = waveform
        self._pending: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._interval = flush_interval
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # Flush when this object is collected or the process exits; the finalizer and
        # the flusher thread hold no reference to ``self``, so collection can happen.
        weakref.finalize(self, _final_flush, self.index, waveform, self._pending, self._lock)

    # -- recording (request path) -------------------------------------------
    def asked(self, resolved: ResolvedRequest, key: str, hit: bool, kind: str = "request") -> None:
        """Count one ask of ``key`` (and one miss unless ``hit``)."""
        with self._lock:
            row = self._pending.get(key)
            if row is None:
                if len(self._pending) >= self.max_pending:
                    return
                if resolved.reference_audio is not None:  # keep the fingerprint, not the clip
                    resolved = replace(resolved, reference_audio=None)
                row = self._pending[key] = [kind, resolved, 0, 0]
            row[2] += 1
            row[3] += 0 if hit else 1
        if self._thread is None:
            self._start()

    # -- persistence ---------------------------------------------------------
    def flush(self) -> None:
        """Fold buffered counts into the table and trim it to ``max_rows``."""
        with self._lock:
            pending = dict(self._pending)
            self._pending.clear()
        if not pending:
            return
        with self._flush_lock:
            _write(self.index, self._waveform, pending, self.max_rows)

    def top(self, by: str, limit: int, kind: str | None = None) -> list[dict[str, Any]]:
        """The ``limit`` most-missed (``by="missed"``) or most-hit (``"hits"``) keys."""
        self.flush()
        order = {"missed": "missed DESC, asked DESC",
                 "hits": "(asked - missed) DESC, asked DESC",
                 "asked": "asked DESC"}[by]
        where, params = ("WHERE kind = ?", (kind,)) if kind else ("", ())
        return self.select("key, kind, tenant, engine, model, voice, instruct, text, payload, "
                           "asked, missed", f"{where} ORDER BY {order} LIMIT ?",
                           (*params, limit))

    def select(self, columns: str, rest: str, args: tuple[object, ...] = (),
               wait: float | None = None) -> list[dict[str, Any]]:
        """Rows of the usage table as dicts: ``SELECT {columns} FROM usage {rest}``."""
        cursor = self.index.connection(wait).execute(
            f"SELECT {columns} FROM usage {rest}", args)
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor]

    def close(self) -> None:
        """Stop the flusher and write what is buffered."""
        self._stop.set()
        self.flush()

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=_flush_loop, args=(
                weakref.ref(self), self._stop, self._interval), name="voxcache-usage",
                daemon=True)
        self._thread.start()


def _write(index: Index, waveform: frozenset[str], pending: dict[str, list[Any]],
           max_rows: int) -> None:
    """Fold ``pending`` counts into the table and trim it to ``max_rows``."""
    now = time.time()
    rows = []
    for key, (kind, resolved, asked, missed) in pending.items():
        payload = key_payload(resolved, waveform)
        rows.append((key, kind, resolved.tenant, resolved.engine_id, resolved.model_revision,
                     resolved.voice, resolved.instruct, resolved.text[:500],
                     json.dumps(payload, sort_keys=True), asked, missed, now))
    with index.transaction(USAGE_WAIT) as db:
        db.executemany(
            "INSERT INTO usage VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(key) DO UPDATE "
            "SET asked = asked + excluded.asked, missed = missed + excluded.missed, "
            "last = excluded.last", rows)
        (count,) = db.execute("SELECT COUNT(*) FROM usage").fetchone()
        if count > max_rows:
            db.execute("DELETE FROM usage WHERE key IN (SELECT key FROM usage "
                       "ORDER BY asked, last LIMIT ?)", (count - int(max_rows * 0.9),))


def _flush_loop(ref: weakref.ref[Usage], stop: threading.Event, interval: float) -> None:
    while not stop.wait(interval):
        usage = ref()
        if usage is None:
            return
        with contextlib.suppress(sqlite3.Error):  # analytics never break serving
            usage.flush()
        del usage


def _final_flush(index: Index, waveform: frozenset[str], pending: dict[str, list[Any]],
                 lock: threading.Lock) -> None:
    with lock:
        items = dict(pending)
        pending.clear()
    if items:
        with contextlib.suppress(sqlite3.Error, OSError):
            _write(index, waveform, items, 100_000)


def request_from_payload(row: dict[str, Any]) -> SynthesisRequest | None:
    """Rebuild a request from a stored key payload (None for cloned voices: no clip kept)."""
    payload = json.loads(row["payload"]) if isinstance(row.get("payload"), str) else row
    if payload.get("reference"):
        return None
    return SynthesisRequest(
        text=payload["text"], voice=payload["voice"], language=payload["language"],
        instruct=payload["instruct"], seed=payload["seed"], speed=payload["speed"],
        params=payload["params"], tenant=payload["tenant"])


def top_phrases(index: Index, limit: int, kind: str | None = None) -> list[dict[str, Any]]:
    """The most-missed requests (or segments) as phrases ``voxcache warm`` understands."""
    phrases = []
    for row in Usage(index, frozenset()).top("missed", limit, kind):
        if row["missed"] <= 0:
            continue
        request = request_from_payload(row)
        if request is None:  # a cloned voice: its reference clip is not kept
            continue
        phrases.append({"text": request.text, "voice": request.voice,
                        "language": request.language, "instruct": request.instruct,
                        "seed": request.seed, "speed": request.speed,
                        "params": dict(request.params)})
    return phrases
