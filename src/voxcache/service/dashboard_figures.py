"""The dashboard's figures at this moment: hit rate, renders, requests, storage, top phrases.

Everything here is read-only and read through what the cache already exposes
(``Cache.stats()``, the tier stack's health, the entry index, the usage table,
the shared history); nothing on a request's path changes for it. An admin (or
anyone, on a server with no keys) sees the whole service; a tenant's key sees
its own tenant: its stored entries and its most missed and most heard phrases.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ..entry import CorruptEntry, decode
from ..policies import savings
from ..policies.admit import recent_refusals, refusal_counts
from ..policies.usage import request_from_payload
from ..tiers.entry_files import NotAnEntryFile, read_entry_file
from ..vocabulary import TierName
from .dashboard_series import SeriesMemo, hit_rate, hits_and_misses, recent, series
from .history import History, HistoryUnavailable, Sample
from .metrics import KIND_SCAN_SECONDS, disk_kinds
from .serving import Server

TOP = 10
"""Rows in each of the top-misses and top-hits lists."""
DEFAULT_TENANT = "default"


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who is looking: the whole service (an admin) or one tenant."""

    admin: bool
    tenant: str | None
    """The tenant whose figures are shown; None: every tenant's."""
    synthesizes_as: str | None
    """The tenant this key renders as (what warm and pin act for); None: it cannot."""


class RenderSeconds:
    """Engine seconds a stored take cost, from its envelope (a small bounded memo: a key's
    take does not change, and the top lists ask for the same few keys every poll)."""

    def __init__(self, size: int = 1024) -> None:
        self._seen: OrderedDict[str, float] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def of(self, server: Server, key: str) -> float | None:
        """The render time recorded in ``key``'s take, or None when it is not stored."""
        with self._lock:
            if key in self._seen:
                return self._seen[key]
        entry = server.cache.in_process.peek(key)
        if entry is None:  # read and verified like any disk read, but counted as none
            with contextlib.suppress(OSError, NotAnEntryFile, CorruptEntry):
                entry = decode(read_entry_file(str(server.cache.folder.path_of(key))), key)
        seconds = entry.header.meta.get("render_seconds") if entry is not None else None
        if not isinstance(seconds, int | float):
            return None
        with self._lock:
            self._seen[key] = float(seconds)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        return float(seconds)


def top_rows(server: Server, by: str, tenant: str | None, limit: int = TOP
             ) -> list[dict[str, Any]]:
    """The most missed (``by="missed"``) or most hit (``"hits"``) rows of the usage table,
    of one tenant or all (the table is read-only here; this process's counts are flushed
    first)."""
    usage = server.cached.usage
    with contextlib.suppress(sqlite3.Error, OSError):
        usage.flush()
    if not usage.path.exists():
        return []
    where = "missed > 0" if by == "missed" else "asked > missed"
    order = "missed DESC, asked DESC" if by == "missed" else "(asked - missed) DESC, asked DESC"
    args: tuple[object, ...] = ()
    if tenant is not None:
        where += " AND tenant = ?"
        args = (tenant,)
    try:
        with contextlib.closing(sqlite3.connect(f"{usage.path.resolve().as_uri()}?mode=ro",
                                                uri=True, timeout=0.5)) as db:
            cursor = db.execute(
                f"SELECT key, kind, tenant, voice, instruct, text, payload, asked, missed "
                f"FROM usage WHERE {where} ORDER BY {order} LIMIT ?", (*args, limit))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor]
    except sqlite3.Error:
        return []


class Figures:
    """Builds the ``/v1/dashboard`` document for one viewer."""

    def __init__(self, server: Server, history: History, upstream: str | None) -> None:
        self.server = server
        self.history = history
        self.upstream = upstream
        self.render_seconds = RenderSeconds()
        self.series_memo = SeriesMemo()
        self._kinds_by_tenant: dict[str, tuple[float, list[tuple[str, int, int]] | None]] = {}
        self._lock = threading.Lock()

    def build(self, viewer: Viewer) -> dict[str, Any]:
        """Everything the page shows to ``viewer``."""
        engine = self.server.cached.engine
        doc: dict[str, Any] = {
            "scope": "admin" if viewer.admin else "tenant", "tenant": viewer.tenant,
            "generated": time.time(), "interval": self.history.interval,
            "window": self.history.window,
            "service": {"engine": engine.id, "model_revision": engine.model_revision},
            "top_misses": self._top("missed", viewer), "top_hits": self._top("hits", viewer),
        }
        doc["savings"] = self._savings(viewer.tenant)
        if not viewer.admin:
            doc["storage"] = self._tenant_storage(viewer.tenant)
            doc["usage"] = self._tenant_usage(viewer.tenant)
            doc["refusals"] = {"by_reason": {}, "recent": recent_refusals(
                self.server.cache, TOP, viewer.tenant)}
            return doc
        now = time.time()
        counters, gauges, shared = self.server.metrics.workers_view()
        stats = self.server.cache.stats()
        tiers = [tier.name for tier in self.server.cache.tiers.tiers]
        doc["service"].update(upstream=_upstream(self.upstream), shared=shared,
                              tiers=self._tiers(), workers=self._workers(shared))
        doc["hit_rate"] = self._hit_rate(stats["counters"])
        doc["renders"] = self._renders(counters, gauges, stats["counters"])
        doc["requests"] = _requests(counters)
        doc["storage"] = self._storage(stats, gauges)
        doc["refusals"] = {"by_reason": refusal_counts(stats["counters"]),
                           "recent": recent_refusals(self.server.cache, TOP)}
        doc["latency"] = None
        doc["series"] = None
        if shared:
            figures = recent(self.history, now)
            doc["hit_rate"]["recent"] = figures.pop("hit_rate")
            doc["latency"] = figures
            doc["series"] = series(self.history, tiers, now, self.series_memo)
        return doc

    # -- parts --------------------------------------------------------------------
    def _savings(self, tenant: str | None) -> dict[str, Any]:
        """The savings ledger of this folder (a tenant sees its own rows)."""
        ledger = self.server.cached.savings
        try:
            ledger.flush()
            rows = savings.totals(savings.rows(self.server.cache, tenant=tenant),
                                  ledger.settings)
        except sqlite3.Error:
            rows = []
        return {"currency": ledger.settings.currency, "rows": rows[:50],
                "total": {name: round(sum(r[name] for r in rows), 6)
                          for name in ("hits", "chars", "seconds", "money")}}

    def _tiers(self) -> list[dict[str, Any]]:
        health = self.server.cache.tiers.health()
        return [{"name": tier.name, "durable": tier.durable, "state": health[tier.name].state,
                 "detail": health[tier.name].detail} for tier in self.server.cache.tiers.tiers]

    def _workers(self, shared: bool) -> list[dict[str, Any]]:
        if not shared:
            return []
        try:
            found = self.history.workers()
        except HistoryUnavailable:
            return []
        return [{"pid": w["pid"], "started": w["started"], "self": w["self"],
                 "requests": int(sum(value for (name, _), value in w["totals"].items()
                                     if name == "voxcache_requests_total"))}
                for w in found]

    @staticmethod
    def _hit_rate(counters: dict[str, int]) -> dict[str, Any]:
        hits, misses = hits_and_misses({k: float(v) for k, v in counters.items()})
        total_hits = sum(hits.values())
        return {"value": hit_rate(total_hits, misses), "hits": int(total_hits),
                "misses": int(misses), "lookups": int(total_hits + misses),
                "by_tier": {tier: int(n) for tier, n in sorted(hits.items())},
                "joins": counters.get("joins", 0), "stale": counters.get("stale", 0),
                "recent": None}

    @staticmethod
    def _renders(counters: dict[Sample, float], gauges: dict[Sample, float],
                 persisted: dict[str, int]) -> dict[str, Any]:
        def total(name: str, **labels: str) -> float:
            return sum(v for (n, lab), v in counters.items() if n == name
                       and all(dict(lab).get(k) == want for k, want in labels.items()))

        def gauge(name: str) -> float:
            return sum(v for (n, _), v in gauges.items() if n == name)

        return {"running": int(gauge("voxcache_renders_running")),
                "queued": int(gauge("voxcache_render_queue_depth")),
                "slots": int(gauge("voxcache_render_slots")),
                "queue_limit": int(gauge("voxcache_render_queue_limit")),
                "ok": int(total("voxcache_renders_total", outcome="ok")),
                "failed": int(total("voxcache_renders_total", outcome="failed")),
                "engine_seconds_saved": round(total("voxcache_render_seconds_saved_total"), 3),
                "engine_seconds_spent": round(persisted.get("render_ms", 0) / 1000, 3)}

    def _storage(self, stats: dict[str, Any], gauges: dict[Sample, float]) -> dict[str, Any]:
        disk = stats["tiers"][TierName.DISK]
        workers = max(1, int(sum(v for (n, _), v in gauges.items() if n == "voxcache_workers")))
        memory_kinds: dict[str, dict[str, float]] = {}
        for (name, labels), value in gauges.items():
            kind = dict(labels).get("kind")
            if kind is None or not name.startswith("voxcache_memory_"):
                continue
            field = {"voxcache_memory_bytes": "bytes", "voxcache_memory_entries": "entries",
                     "voxcache_memory_budget_bytes": "budget"}[name]
            memory_kinds.setdefault(kind, {})[field] = value
        kinds = self.server.metrics.collector.disk_kinds()
        counters = stats["counters"]
        return {
            "tiers": [
                {"tier": TierName.MEMORY, "workers": workers,
                 "bytes": int(sum(k.get("bytes", 0) for k in memory_kinds.values())),
                 "entries": int(sum(k.get("entries", 0) for k in memory_kinds.values())),
                 "kinds": [{"kind": kind, "bytes": int(v.get("bytes", 0)),
                            "entries": int(v.get("entries", 0)),
                            "budget": int(v.get("budget", 0)) or None}
                           for kind, v in sorted(memory_kinds.items())]},
                {"tier": TierName.DISK, "bytes": disk["bytes"], "entries": disk["entries"],
                 "max_bytes": disk["max_bytes"], "max_entries": disk["max_entries"],
                 "kinds": None if kinds is None else [
                     {"kind": kind, "entries": count, "bytes": size}
                     for kind, count, size in kinds]},
            ],
            "evictions": {name[len("evictions_"):]: value for name, value in
                          sorted(counters.items()) if name.startswith("evictions_")},
            "corruptions": counters.get("corruptions", 0),
            "faults": {name: value for name, value in sorted(counters.items())
                       if name.endswith("_errors")},
        }

    def _tenant_storage(self, tenant: str | None) -> dict[str, Any]:
        kinds = self._tenant_kinds(tenant)
        return {"kinds": None if kinds is None else [
            {"kind": kind, "entries": count, "bytes": size} for kind, count, size in kinds],
            "entries": None if kinds is None else sum(k[1] for k in kinds),
            "bytes": None if kinds is None else sum(k[2] for k in kinds)}

    def _tenant_kinds(self, tenant: str | None) -> list[tuple[str, int, int]] | None:
        """A tenant's entries per kind, reused for 30 s like the admin's (the index has no
        tenant column index: each count is a scan)."""
        key = tenant or ""
        with self._lock:
            when, kinds = self._kinds_by_tenant.get(key, (0.0, None))
        if kinds is not None and time.monotonic() - when < KIND_SCAN_SECONDS:
            return kinds
        kinds = disk_kinds(self.server.cache, tenant)
        if kinds is not None:
            with self._lock:
                if len(self._kinds_by_tenant) >= 256:
                    self._kinds_by_tenant.clear()
                self._kinds_by_tenant[key] = (time.monotonic(), kinds)
        return kinds

    def _tenant_usage(self, tenant: str | None) -> dict[str, Any]:
        """The tenant's own asks and misses as the usage table recorded them (whole
        requests; the table keeps the most asked rows, so this is what it still holds)."""
        usage = self.server.cached.usage
        asked = missed = 0
        if usage.path.exists():
            with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(
                    f"{usage.path.resolve().as_uri()}?mode=ro", uri=True, timeout=0.5)) as db:
                asked, missed = db.execute(
                    "SELECT COALESCE(SUM(asked), 0), COALESCE(SUM(missed), 0) FROM usage "
                    "WHERE tenant = ? AND kind = 'request'", (tenant,)).fetchone()
        return {"asked": asked, "missed": missed, "hit_rate": hit_rate(asked - missed, missed)}

    def _top(self, by: str, viewer: Viewer) -> list[dict[str, Any]]:
        rows = top_rows(self.server, by, viewer.tenant)
        mean = self._mean_render_seconds()
        out = []
        for row in rows:
            key, asked, missed = row["key"], int(row["asked"]), int(row["missed"])
            count = missed if by == "missed" else asked - missed
            seconds = self.render_seconds.of(self.server, key)
            estimated = seconds is None and mean is not None
            per_take = seconds if seconds is not None else mean
            request = request_from_payload(row)
            warm = None if request is None else {
                "text": request.text, "voice": request.voice, "language": request.language,
                "instruct": request.instruct, "seed": request.seed, "speed": request.speed,
                "params": dict(request.params)}
            can_warm, why = _can_warm(viewer, str(row["tenant"]), warm is not None)
            out.append({
                "key": key, "kind": row["kind"], "tenant": row["tenant"], "voice": row["voice"],
                "instruct": row["instruct"], "text": row["text"], "asked": asked,
                "missed": missed, "hits": asked - missed,
                "engine_seconds": None if per_take is None else round(per_take * count, 3),
                "engine_seconds_estimated": estimated,
                "stored": self._stored(key), "pinned": self.server.cache.folder.is_pinned(key),
                "request": warm, "can_warm": can_warm, "why_not": why})
        return out

    def _stored(self, key: str) -> bool:
        return self.server.cache.in_process.peek(key) is not None or \
            self.server.cache.folder.contains(key)

    def _mean_render_seconds(self) -> float | None:
        counters = self.server.cache.folder.counters() or {}
        syntheses = counters.get("syntheses", 0)
        return counters.get("render_ms", 0) / 1000 / syntheses if syntheses else None


def _requests(counters: dict[Sample, float]) -> dict[str, Any]:
    """Requests per route: served, refused (429/503), failed (other 5xx), refused as bad
    input (4xx)."""
    routes: dict[str, dict[str, int]] = {}
    by_cache: dict[str, int] = {}
    for (name, labels), value in counters.items():
        if name != "voxcache_requests_total":
            continue
        label = dict(labels)
        route = routes.setdefault(label.get("route", "?"), {
            "requests": 0, "hits": 0, "misses": 0, "client_errors": 0, "refused": 0,
            "errors": 0})
        code, cache, n = label.get("code", ""), label.get("cache", ""), int(value)
        route["requests"] += n
        by_cache[cache] = by_cache.get(cache, 0) + n
        if code in ("429", "503"):
            route["refused"] += n
        elif code.startswith("5"):
            route["errors"] += n
        elif code.startswith("4"):
            route["client_errors"] += n
        elif cache in ("HIT", "STALE"):
            route["hits"] += n
        elif cache in ("MISS", "PARTIAL", "JOINED"):
            route["misses"] += n
    return {"total": sum(by_cache.values()), "by_cache": dict(sorted(by_cache.items())),
            "routes": [{"route": name, **figures} for name, figures in sorted(routes.items())]}


def _can_warm(viewer: Viewer, tenant: str, rebuildable: bool) -> tuple[bool, str | None]:
    """Whether this viewer's key can render (and pin) a row of ``tenant``, and if not, why."""
    if not rebuildable:
        return False, "a cloned voice: its reference clip is not kept, so it cannot be rebuilt"
    if viewer.synthesizes_as is None:
        return False, "an [admin] key does not render: warm it with the tenant's own key"
    if viewer.synthesizes_as != tenant:
        return False, f"another tenant's phrase ({tenant}): warm it with that tenant's key"
    return True, None


def _upstream(spec: str | None) -> dict[str, str] | None:
    """The gateway's upstream as kind and address, without credentials, path or query."""
    if not spec:
        return None
    kind, _, url = spec.partition("=")
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # not a number: say nothing rather than echo what was written
        port = ""
    return {"kind": kind, "address": f"{parts.scheme}://{host}{port}" if parts.scheme else ""}
