"""Prometheus metrics: the service's request figures summed over its workers, plus the cache's.

Each app has its own registries. Request series are counted into ``local`` and exported
summed over every worker through ``history.History`` (so any worker's scrape shows the same
totals); tier totals, evictions and corruptions are read from ``cache.stats()`` at scrape
time. Every name is documented in docs/operating/metrics.md.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..cache import Cache
from ..entry import Entry
from ..policies import savings as ledger
from ..policies.admit import refusal_counts
from ..stages.figures import EVENTS as STAGE_EVENTS
from ..stages.figures import stage_figures
from ..tiers.index import REQUEST_WAIT
from ..vocabulary import TierName
from .history import History, HistoryUnavailable, Sample, sample

# the _created series double every scrape for no use here
disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it bare

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30)
KIND_SCAN_SECONDS = 30.0
"""How long the disk tier's per-kind totals are reused (they are a scan of the index)."""

WORKER_GAUGES = {
    "voxcache_render_queue_depth": ("Renders waiting for a slot (all workers)", ()),
    "voxcache_renders_running": ("Renders holding a slot (all workers)", ()),
    "voxcache_render_slots": ("Render slots (all workers)", ()),
    "voxcache_render_queue_limit": ("Renders that may wait for a slot before a miss is refused "
                                    "(all workers)", ()),
    "voxcache_workers": ("Worker processes serving (each counts itself)", ()),
    "voxcache_memory_bytes": ("Bytes held by the memory tier, per kind (all workers)",
                              ("kind",)),
    "voxcache_memory_entries": ("Entries held by the memory tier, per kind (all workers)",
                                ("kind",)),
    "voxcache_memory_budget_bytes": ("Memory tier budget per kind (each worker has its own: "
                                     "summed)", ("kind",)),
}
"""Gauges each worker reports for itself; ``/metrics`` exports their sum over live workers."""


class Metrics:
    """The series a voxcache server exports."""

    def __init__(self, cache: Cache, queue_depth: Callable[[], int],
                 running: Callable[[], int],
                 upstream: Callable[[], list[dict[str, Any]]] | None = None,
                 savings: ledger.Ledger | None = None) -> None:
        self.cache = cache
        self.upstream = upstream
        """A gateway's or edge's ``engine.reachability`` (None for an embedded engine)."""
        self.savings = savings
        """The savings ledger (flushed before each scrape, so this worker's hits are in)."""
        self.local = CollectorRegistry()
        """This process's own counters (published to the history, summed on export)."""
        r = self.local
        self.requests = Counter("voxcache_requests", "Requests by route, cache status and code",
                                ["route", "cache", "code"], registry=r)
        self.hits = Counter("voxcache_hits", "Hits served, by tier", ["tier"], registry=r)
        self.renders = Counter("voxcache_renders", "Renders run", ["outcome"], registry=r)
        self.render_seconds = Histogram("voxcache_render_seconds", "Wall time of one render",
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.saved_seconds = Counter("voxcache_render_seconds_saved",
                                     "Render time the hits did not spend", registry=r)
        self.ttfa = Histogram("voxcache_time_to_first_audio_seconds",
                              "From request to the first audio byte, by cache status", ["cache"],
                              buckets=LATENCY_BUCKETS, registry=r)
        self.request_seconds = Histogram(
            "voxcache_request_seconds", "From request to the last byte of an audio response, "
            "by cache status (X-Cache)", ["cache"], buckets=LATENCY_BUCKETS, registry=r)
        self._gauges: dict[str, Callable[[], float]] = {
            "voxcache_render_queue_depth": queue_depth, "voxcache_renders_running": running}
        self.history: History | None = None
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.registry = CollectorRegistry()
        """What ``/metrics`` exports."""
        self.collector = _Collector(self)
        self.registry.register(self.collector)

    # -- counting (the request path) -------------------------------------------------
    def _child(self, family: Any, *labels: str) -> Any:
        """A labelled series, looked up once (``labels()`` costs microseconds on every hit)."""
        child = self._children.get((id(family), labels))
        if child is None:
            child = self._children[(id(family), labels)] = family.labels(*labels)
        return child

    def hit(self, tier: str, entry: Entry) -> None:
        """Count a hit and the render time it saved (recorded in the entry at render time)."""
        self._child(self.hits, tier).inc()
        saved = entry.header.meta.get("render_seconds")
        if isinstance(saved, int | float):
            self.saved_seconds.inc(saved)

    def rendered(self, seconds: float, failed: bool) -> None:
        """Count one render and its time."""
        self.renders.labels("failed" if failed else "ok").inc()
        if not failed:
            self.render_seconds.observe(seconds)

    def request(self, route: str, cache: str, code: int) -> None:
        """Count one answered request."""
        self._child(self.requests, route, cache, str(code)).inc()

    def first_audio(self, cache: str, seconds: float) -> None:
        """Record time to first audio."""
        self._child(self.ttfa, cache).observe(seconds)

    def answered(self, cache: str, seconds: float) -> None:
        """Record the whole time of an audio response (``timing.ResponseTiming`` calls it)."""
        self.request_seconds.labels(cache).observe(seconds)

    # -- sharing between workers ------------------------------------------------------
    def attach(self, history: History, admission: Any) -> None:
        """Sum over the workers sharing ``history`` from now on; report the render slots."""
        self.history = history
        self._gauges["voxcache_render_slots"] = lambda: admission.concurrency
        self._gauges["voxcache_render_queue_limit"] = lambda: admission.queue

    def process_counters(self) -> dict[Sample, float]:
        """This process's counter and histogram samples, cumulative since it started."""
        return {(s.name, tuple(sorted(s.labels.items()))): float(s.value)
                for family in self.local.collect() for s in family.samples}

    def process_gauges(self) -> dict[Sample, float]:
        """This process's gauges: render slots and queue, memory tier per kind, itself."""
        gauges = {sample(name): float(read()) for name, read in self._gauges.items()}
        gauges[sample("voxcache_workers")] = 1.0
        for kind, figures in self.cache.in_process.stats().items():
            gauges[sample("voxcache_memory_bytes", kind=kind)] = float(figures["bytes"])
            gauges[sample("voxcache_memory_entries", kind=kind)] = float(figures["entries"])
            gauges[sample("voxcache_memory_budget_bytes", kind=kind)] = float(
                figures["budget"] or 0)
        return gauges

    def workers_view(self) -> tuple[dict[Sample, float], dict[Sample, float], bool]:
        """(counters, gauges, shared): every worker's figures summed, this process's own
        published first; this process's alone (``shared`` False) when there is no history
        or it cannot be used now."""
        counters, gauges = self.process_counters(), self.process_gauges()
        if self.history is None:
            return counters, gauges, False
        try:
            self.history.publish(counters, gauges)
            totals = self.history.totals()
            others = self.history.other_gauges()
        except HistoryUnavailable:
            return counters, gauges, False
        for key, value in others.items():
            gauges[key] = gauges.get(key, 0.0) + value
        return totals, gauges, True

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class _Collector(Collector):
    """Everything ``/metrics`` exports, from one look at the workers and one at the cache."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.cache = metrics.cache
        self._kinds: tuple[float, list[tuple[str, int, int]] | None] = (0.0, None)
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        counters, gauges, _shared = self.metrics.workers_view()
        yield from self._workers(counters, gauges)
        stats = self.cache.stats(REQUEST_WAIT)  # a scrape never stalls on a locked index
        disk = stats["tiers"][TierName.DISK]
        stored = GaugeMetricFamily("voxcache_stored_bytes", "Bytes stored per tier (memory: "
                                   "all workers)", labels=["tier"])
        entries = GaugeMetricFamily("voxcache_stored_entries", "Entries stored per tier "
                                    "(memory: all workers)", labels=["tier"])
        if disk["bytes"] is not None:  # None while the index cannot answer
            stored.add_metric([TierName.DISK], disk["bytes"])
            entries.add_metric([TierName.DISK], disk["entries"])
        stored.add_metric([TierName.MEMORY], _total(gauges, "voxcache_memory_bytes"))
        entries.add_metric([TierName.MEMORY], _total(gauges, "voxcache_memory_entries"))
        yield stored
        yield entries
        yield from _caps(disk)
        yield from self._disk_kinds()
        yield from self._health()
        yield from upstream_families(self.metrics.upstream)
        events = CounterMetricFamily("voxcache_cache_events",
                                     "Persisted cache counters (all processes sharing the "
                                     "folder): hits_*, misses, syntheses, joins, evictions_*, "
                                     "corruptions, *_errors", labels=["event"])
        for name, value in sorted(stats["counters"].items()):
            events.add_metric([name], value)
        for name in ("corruptions", "misses", "joins", "syntheses"):
            if name not in stats["counters"]:
                events.add_metric([name], 0)
        yield events
        yield from stage_families(stats["counters"])  # stage caches (issue 12)
        yield from refusal_families(stats["counters"])
        yield from self._savings()

    def _savings(self) -> Iterator[Any]:
        """The savings ledger of the cache folder (every worker, since it was created)."""
        books = self.metrics.savings
        families = {
            "hits": CounterMetricFamily("voxcache_savings_hits", "Takes served from the cache, "
                                        "per tenant and voice (the savings ledger)",
                                        labels=["tenant", "voice"]),
            "chars": CounterMetricFamily("voxcache_savings_characters", "Characters of text "
                                         "served from the cache, per tenant and voice",
                                         labels=["tenant", "voice"]),
            "seconds": CounterMetricFamily("voxcache_savings_engine_seconds", "Engine seconds "
                                           "the takes served from the cache cost when rendered",
                                           labels=["tenant", "voice"]),
            "money": CounterMetricFamily("voxcache_savings_money", "What the takes served from "
                                         "the cache would have cost at the [savings] prices",
                                         labels=["tenant", "voice", "currency"]),
        }
        if books is not None:
            with contextlib.suppress(sqlite3.Error):
                books.flush()
                for row in ledger.totals(ledger.rows(self.cache), books.settings):
                    labels = [row["tenant"], row["voice"]]
                    for name in ("hits", "chars", "seconds"):
                        families[name].add_metric(labels, row[name])
                    families["money"].add_metric([*labels, row["currency"]], row["money"])
        yield from families.values()

    def _workers(self, counters: dict[Sample, float], gauges: dict[Sample, float]
                 ) -> Iterator[Any]:
        """The per-process families, each sample summed over the workers."""
        for family in self.metrics.local.collect():
            out = Metric(family.name, family.documentation, family.type)
            names = {family.name + suffix for suffix in ("", "_total", "_bucket", "_count",
                                                         "_sum")}
            for (name, labels), value in sorted(counters.items(), key=_exposition_order):
                if name in names:
                    out.add_sample(name, dict(labels), value)
            yield out
        for name, (documentation, labelnames) in WORKER_GAUGES.items():
            out = GaugeMetricFamily(name, documentation, labels=list(labelnames))
            for (sample_name, labels), value in sorted(gauges.items()):
                if sample_name == name:
                    out.add_metric([dict(labels)[label] for label in labelnames], value)
            yield out

    def _health(self) -> Iterator[Any]:
        up = GaugeMetricFamily("voxcache_tier_up", "1 while a tier is usable (ok or degraded), "
                               "0 while it is down (its breaker is open)", labels=["tier"])
        degraded = GaugeMetricFamily("voxcache_tier_degraded", "1 while a tier works around a "
                                     "fault (an index being rebuilt, a recent failed write)",
                                     labels=["tier"])
        for name, health in self.cache.tiers.health().items():
            up.add_metric([name], 1.0 if health.usable else 0.0)
            degraded.add_metric([name], 1.0 if health.state == "degraded" else 0.0)
        yield up
        yield degraded

    def _disk_kinds(self) -> Iterator[Any]:
        by_bytes = GaugeMetricFamily("voxcache_disk_kind_bytes", "Bytes on the disk tier per "
                                     "artifact kind (refreshed every 30 s)", labels=["kind"])
        by_entries = GaugeMetricFamily("voxcache_disk_kind_entries", "Entries on the disk tier "
                                       "per artifact kind (refreshed every 30 s)",
                                       labels=["kind"])
        for kind, count, size in self.disk_kinds() or ():
            by_bytes.add_metric([kind], size)
            by_entries.add_metric([kind], count)
        yield by_bytes
        yield by_entries

    def disk_kinds(self) -> list[tuple[str, int, int]] | None:
        """(kind, entries, bytes) on disk, from a scan of the index at most every 30 s."""
        with self._lock:
            when, kinds = self._kinds
            if kinds is not None and time.monotonic() - when < KIND_SCAN_SECONDS:
                return kinds
        kinds = disk_kinds(self.cache)
        if kinds is not None:
            with self._lock:
                self._kinds = (time.monotonic(), kinds)
        return kinds


def upstream_families(reachability: Callable[[], list[dict[str, Any]]] | None
                      ) -> Iterator[Any]:
    """Whether the upstream (a gateway's) or the center (an edge's) answers, as this
    process last saw it (probed when no call said so for a few seconds). Empty for an
    embedded engine: the families are there, with no series."""
    labels = ["role", "kind", "url"]
    up = GaugeMetricFamily("voxcache_upstream_up", "1 while the upstream (role upstream) or "
                           "the center (role center) answers, 0 while it cannot be reached",
                           labels=labels)
    since = GaugeMetricFamily("voxcache_upstream_since_timestamp_seconds", "When "
                              "voxcache_upstream_up last changed (Unix time)", labels=labels)
    for state in reachability() if reachability is not None else ():
        if state["reachable"] is None:
            continue
        names = [state["role"], state["kind"], state["url"]]
        up.add_metric(names, 1.0 if state["reachable"] else 0.0)
        since.add_metric(names, float(state["since"]))
    yield up
    yield since


# -- stage caches (issue 12): the persisted stage_<kind>_<name> counters, labelled by kind --
def stage_families(counters: dict[str, int]) -> Iterator[Any]:
    """The stage caches' figures per kind (every kind and event present, zero when nothing
    happened: an alert on a missing series never fires). Folder-wide, like the counters."""
    figures = stage_figures(counters)
    events = CounterMetricFamily("voxcache_stage_events", "Stage cache lookups per artifact "
                                 "kind: hits, misses (extracted), joins (shared another "
                                 "caller's extraction)", labels=["kind", "event"])
    written = CounterMetricFamily("voxcache_stage_bytes_written", "Bytes of stage artifacts "
                                  "written, per kind", labels=["kind"])
    saved = CounterMetricFamily("voxcache_stage_seconds_saved", "Extractor seconds the stage "
                                "cache hits did not spend, per kind", labels=["kind"])
    spent = CounterMetricFamily("voxcache_stage_compute_seconds", "Extractor seconds spent on "
                                "stage cache misses, per kind", labels=["kind"])
    for kind, figure in figures.items():
        for event in STAGE_EVENTS:
            events.add_metric([kind, event], figure[event])
        written.add_metric([kind], figure["bytes"])
        saved.add_metric([kind], figure["saved_seconds"])
        spent.add_metric([kind], figure["compute_seconds"])
    yield from (events, written, saved, spent)
# -- end of stage caches --

REFUSAL_REASONS = ("admission:admit_after", "quality:nonfinite", "quality:clipping",
                   "quality:dc", "quality:silence", "quality:runaway", "quality:truncated",
                   "quality:inner_silence", "quality:asr")
"""Refusal reasons exported at 0 before they first happen (the classes a deployment uses
appear with their first refusal)."""


def refusal_families(counters: dict[str, int]) -> Iterator[Any]:
    """Takes the storing gate refused, by stage and reason, and what the gate cost."""
    refused = CounterMetricFamily("voxcache_refusals", "Takes served but not stored, by "
                                  "the storing gate's stage (admission, quality) and reason "
                                  "(a text class, admit_after, a quality check)",
                                  labels=["stage", "reason"])
    found = {reason: 0 for reason in REFUSAL_REASONS} | refusal_counts(counters)
    for reason, value in sorted(found.items()):
        stage, _, why = reason.partition(":")
        refused.add_metric([stage, why], value)
    checks = CounterMetricFamily("voxcache_gate_checks", "Takes the quality gate checked "
                                 "(signal checks, ASR round trips)", labels=["check"])
    spent = CounterMetricFamily("voxcache_gate_seconds", "Time the quality gate spent, by check",
                                labels=["check"])
    checks.add_metric(["signal"], counters.get("gate_checks", 0))
    checks.add_metric(["asr"], counters.get("gate_asr_checks", 0))
    spent.add_metric(["signal"], counters.get("gate_check_us", 0) / 1e6)
    spent.add_metric(["asr"], counters.get("gate_asr_ms", 0) / 1e3)
    yield from (refused, checks, spent)


def _caps(disk: dict[str, Any]) -> Iterator[Any]:
    max_bytes = GaugeMetricFamily("voxcache_stored_bytes_limit", "The disk tier's byte cap "
                                  "(absent when unbounded)", labels=["tier"])
    max_entries = GaugeMetricFamily("voxcache_stored_entries_limit", "The disk tier's entry "
                                    "cap (absent when unbounded)", labels=["tier"])
    if disk.get("max_bytes") is not None:
        max_bytes.add_metric([TierName.DISK], disk["max_bytes"])
    if disk.get("max_entries") is not None:
        max_entries.add_metric([TierName.DISK], disk["max_entries"])
    yield max_bytes
    yield max_entries


def _exposition_order(item: tuple[Sample, float]) -> tuple[object, ...]:
    """Samples by name, then labels, histogram buckets by their numeric bound (the text
    format wants ``le`` ascending; as strings "10.0" would sort before "2.5")."""
    (name, labels), _ = item
    others = tuple(pair for pair in labels if pair[0] != "le")
    bound = next((float(value) for key, value in labels if key == "le"), 0.0)
    return name, others, bound


def _total(gauges: dict[Sample, float], name: str) -> float:
    return sum(value for (sample_name, _), value in gauges.items() if sample_name == name)


def disk_kinds(cache: Cache, tenant: str | None = None) -> list[tuple[str, int, int]] | None:
    """(kind, entries, bytes) on the disk tier, of one tenant or all; None while the index
    cannot answer (it is an accelerator: a figure goes missing, nothing fails)."""
    where, args = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
    try:
        rows = cache.index.query(
            f"SELECT kind, COUNT(*), COALESCE(SUM(size), 0) FROM entries {where} "
            "GROUP BY kind ORDER BY kind", args, wait=0.2)
    except sqlite3.Error:
        return None
    return [(str(kind), int(count), int(size)) for kind, count, size in rows]
