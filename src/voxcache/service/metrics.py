"""Prometheus metrics: this process's request figures plus the cache's persisted counters.

Each app gets its own registry (two apps in one test process must not clash).
Request-level series are counted here as requests are served; tier totals,
evictions and corruptions are read from ``cache.stats()`` at scrape time, so
they are the cache folder's figures across every process that shares it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from ..cache import Cache
from ..entry import Entry

disable_created_metrics()  # the _created series double every scrape for no use here

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
                   10, 30)


class Metrics:
    """The series a voxcache server exports."""

    def __init__(self, cache: Cache, queue_depth: Callable[[], int],
                 running: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("voxcache_requests", "Requests by route, cache status and code",
                                ["route", "cache", "code"], registry=r)
        self.hits = Counter("voxcache_hits", "Hits served by this process, by tier", ["tier"],
                            registry=r)
        self.renders = Counter("voxcache_renders", "Renders run by this process", ["outcome"],
                               registry=r)
        self.render_seconds = Histogram("voxcache_render_seconds", "Wall time of one render",
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.saved_seconds = Counter("voxcache_render_seconds_saved",
                                     "Render time the hits of this process did not spend",
                                     registry=r)
        self.ttfa = Histogram("voxcache_time_to_first_audio_seconds",
                              "From request to the first audio byte, by cache status", ["cache"],
                              buckets=LATENCY_BUCKETS, registry=r)
        Gauge("voxcache_render_queue_depth", "Renders waiting for a slot",
              registry=r).set_function(queue_depth)
        Gauge("voxcache_renders_running", "Renders holding a slot",
              registry=r).set_function(running)
        r.register(_CacheCollector(cache))

    def hit(self, tier: str, entry: Entry) -> None:
        """Count a hit and the render time it saved (recorded in the entry at render time)."""
        self.hits.labels(tier).inc()
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
        self.requests.labels(route, cache, str(code)).inc()

    def first_audio(self, cache: str, seconds: float) -> None:
        """Record time to first audio."""
        self.ttfa.labels(cache).observe(seconds)

    def exposition(self) -> bytes:
        """The text format Prometheus scrapes."""
        return generate_latest(self.registry)


class _CacheCollector(Collector):
    """Tier sizes and the persisted counters, read from the cache at scrape time."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Any]:
        stats = self.cache.stats()
        stored = GaugeMetricFamily("voxcache_stored_bytes", "Bytes stored per tier",
                                   labels=["tier"])
        entries = GaugeMetricFamily("voxcache_stored_entries", "Entries stored per tier",
                                    labels=["tier"])
        disk = stats["tiers"]["disk"]
        if disk["bytes"] is not None:  # None while the index cannot answer
            stored.add_metric(["disk"], disk["bytes"])
            entries.add_metric(["disk"], disk["entries"])
        memory = stats["tiers"]["memory"]
        stored.add_metric(["memory"], sum(k["bytes"] for k in memory.values()))
        entries.add_metric(["memory"], sum(k["entries"] for k in memory.values()))
        yield stored
        yield entries
        counters = CounterMetricFamily("voxcache_cache_events",
                                       "Persisted cache counters (all processes sharing the "
                                       "folder): hits_*, misses, syntheses, joins, evictions_*, "
                                       "corruptions", labels=["event"])
        for name, value in sorted(stats["counters"].items()):
            counters.add_metric([name], value)
        for name in ("corruptions", "misses", "joins", "syntheses"):
            if name not in stats["counters"]:
                counters.add_metric([name], 0)
        yield counters
