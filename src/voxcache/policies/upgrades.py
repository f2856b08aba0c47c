"""Model upgrades without losing the cache: lineage aliases and stale-while-revalidate.

The model revision is in every key, so a new model never serves old audio as new. A
"lineage" key (the payload without the revision) maps, in the index's ``aliases`` table,
to the content key of its latest take. ``strict`` (default) lets old takes age out;
``stale-while-revalidate`` serves the old take marked STALE and re-renders it on one
lowest-priority background thread, then moves the alias. docs/operating/service.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import InvalidParameter
from ..key import digest
from ..outcome import NO_PROGRESS, Result, seconds_since
from ..resolved import ResolvedRequest
from ..scheduling import BACKGROUND, RENDER_PRIORITY
from ..tiers.index import Index
from ..vocabulary import Outcome
from .pipeline import Pipeline

log = logging.getLogger("voxcache.upgrades")

POLICIES = {"strict": "strict", "stale-while-revalidate": "stale-while-revalidate",
            "swr": "stale-while-revalidate"}
ALIAS_WAIT = 0.2
"""Seconds a miss waits to record its alias behind another process's write lock."""


def parse_model_policy(policy: str) -> str:
    """Return the canonical model-upgrade policy name, or refuse it."""
    try:
        return POLICIES[policy.strip().lower()]
    except (KeyError, AttributeError):
        raise InvalidParameter(f"model policy {policy!r} is not one of: strict, "
                               "stale-while-revalidate") from None


def lineage_key(payload: dict[str, Any]) -> str:
    """Key of a request (its key payload) with its model revision left out: the same words
    across models."""
    return digest({**payload, "model": None, "kind": "lineage"})


class Aliases:
    """Mutable names (lineage → latest content key and its model revision): a table of the
    folder's index database (``tiers.index_schema``)."""

    def __init__(self, index: Index, fault: Callable[[str, BaseException], None]) -> None:
        self.index = index
        self._fault = fault

    def record(self, lineage: str, key: str, model: str) -> None:
        """Point ``lineage`` at the take just stored."""
        try:
            with self.index.transaction(ALIAS_WAIT) as db:
                db.execute("INSERT INTO aliases VALUES (?,?,?,?) ON CONFLICT(lineage) DO UPDATE "
                           "SET key = excluded.key, model = excluded.model, "
                           "updated = excluded.updated", (lineage, key, model, time.time()))
        except (sqlite3.Error, OSError) as exc:  # an accelerator: never fail a request on it
            self._fault("alias record", exc)

    def get(self, lineage: str) -> tuple[str, str] | None:
        """Return (content key, model revision) of the latest take of ``lineage``."""
        try:
            rows = self.index.query("SELECT key, model FROM aliases WHERE lineage = ?",
                                    (lineage,), ALIAS_WAIT)
        except (sqlite3.Error, OSError) as exc:
            self._fault("alias lookup", exc)
            return None
        return (rows[0][0], rows[0][1]) if rows else None


class Revalidator:
    """One low-priority background worker that re-renders stale takes, each key once."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[str, Callable[[], object]]] = queue.Queue()
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, key: str, task: Callable[[], object]) -> bool:
        """Queue ``task`` for ``key`` unless it is already queued; True if queued."""
        with self._lock:
            if key in self._queued:
                return False
            self._queued.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="voxcache-revalidate",
                                                daemon=True)
                self._thread.start()
        self._queue.put((key, task))
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued re-render has finished (for tests and shutdown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not self._queued:
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _run(self) -> None:
        # The lowest CPU priority (Linux sets it per thread), and the last render slot.
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        RENDER_PRIORITY.set(BACKGROUND)
        while True:
            key, task = self._queue.get()
            try:
                task()
            except Exception:  # a failed re-render leaves the stale take in place
                log.exception("background re-render of %s failed", key[:16])
            finally:
                with self._lock:
                    self._queued.discard(key)


class Upgrades:
    """The model-upgrade policy of one cache: its aliases, its re-renders, its rule."""

    def __init__(self, index: Index, fault: Callable[[str, BaseException], None],
                 policy: str) -> None:
        self.policy = parse_model_policy(policy)
        self.aliases = Aliases(index, fault)
        self.revalidator = Revalidator()

    def serve_stale(self, pipeline: Pipeline, resolved: ResolvedRequest, key: str,
                    started: float) -> Result | None:
        """Under stale-while-revalidate, an older model's take of this request (its
        re-render queued at background priority); None if there is none or the policy is
        strict."""
        if self.policy == "strict":
            return None
        found = self.aliases.get(lineage_key(pipeline.key_payload(resolved)))
        if found is None or found[1] == resolved.model_revision:
            return None
        old = pipeline.lookup(found[0])
        if old is None:
            return None
        self.revalidator.submit(key, lambda: pipeline.render_once(
            resolved, key, time.perf_counter(), NO_PROGRESS, join=False))
        pipeline.count("stale")
        return Result(old[0], found[0], Outcome.STALE, old[1], seconds_since(started))

    def remember(self, pipeline: Pipeline, resolved: ResolvedRequest, key: str) -> None:
        """Remember ``key`` as the latest take of its lineage."""
        self.aliases.record(lineage_key(pipeline.key_payload(resolved)), key,
                            resolved.model_revision)
