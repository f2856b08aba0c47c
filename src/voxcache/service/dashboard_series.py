"""The dashboard's charts: the shared history turned into one value per bucket and series.

Rates and quantiles are computed as Prometheus computes them, so the page and a
Grafana board over the same service agree: a hit rate is hits ÷ (hits + misses)
of the cache folder's persisted counters, and a latency quantile is
``histogram_quantile`` over the summed buckets of every worker. Ratios and
quantiles cover a trailing minute (sparse traffic would otherwise leave most
points empty); counts are per bucket, as requests per second.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .history import History, Sample, quantile

TRAILING_SECONDS = 60.0
HIT_CACHE = frozenset({"HIT", "STALE"})
"""X-Cache values served from storage."""
MISS_CACHE = frozenset({"MISS", "PARTIAL", "JOINED"})
"""X-Cache values that waited for a render (their own, partly, or another caller's)."""
REFUSED_CODES = frozenset({"429", "503"})

Bucket = Mapping[Sample, float]


def hits_and_misses(counters: Mapping[str, float]) -> tuple[dict[str, float], float]:
    """(hits per tier, misses) from persisted counter values by event name."""
    hits = {name[len("hits_"):]: value for name, value in counters.items()
            if name.startswith("hits_")}
    return hits, counters.get("misses", 0.0)


def hit_rate(hits: float, misses: float) -> float | None:
    """hits ÷ (hits + misses); None before the first lookup."""
    return hits / (hits + misses) if hits + misses > 0 else None


LATENCY_GROUPS = (("hit", "voxcache_request_seconds_bucket", HIT_CACHE),
                  ("miss", "voxcache_request_seconds_bucket", MISS_CACHE),
                  ("ttfa", "voxcache_time_to_first_audio_seconds_bucket", None))


def histograms(bucket: Bucket) -> dict[str, dict[float, float]]:
    """One bucket's latency histograms: hits', misses' and first-audio counts per bound."""
    out: dict[str, dict[float, float]] = {group: {} for group, _, _ in LATENCY_GROUPS}
    for (sample_name, labels), value in bucket.items():
        if not sample_name.endswith("_bucket"):
            continue
        label = dict(labels)
        for group, name, caches in LATENCY_GROUPS:
            if sample_name == name and (caches is None or label.get("cache") in caches):
                bound = float(label["le"])
                out[group][bound] = out[group].get(bound, 0.0) + value
    return out


def latency(per_bucket: Iterable[dict[str, dict[float, float]]]) -> dict[str, float | None]:
    """p50 and p95 of hits', misses' and first-audio times over buckets' ``histograms``."""
    merged: dict[str, dict[float, float]] = {group: {} for group, _, _ in LATENCY_GROUPS}
    for histogram_set in per_bucket:
        for group, counts in histogram_set.items():
            into = merged[group]
            for bound, value in counts.items():
                into[bound] = into.get(bound, 0.0) + value
    out: dict[str, float | None] = {}
    for group, counts in merged.items():
        out[f"{group}_p50"], out[f"{group}_p95"] = quantile(0.5, counts), quantile(0.95, counts)
    return out


def requests(bucket: Bucket) -> dict[str, float]:
    """Requests counted in one bucket: served from storage, rendered, refused, failed."""
    out = {"hits": 0.0, "misses": 0.0, "refused": 0.0, "errors": 0.0}
    for (name, labels), value in bucket.items():
        if name != "voxcache_requests_total":
            continue
        label = dict(labels)
        code, cache = label.get("code", ""), label.get("cache", "")
        if code in REFUSED_CODES:
            out["refused"] += value
        elif code.startswith("5"):
            out["errors"] += value
        elif cache in HIT_CACHE:
            out["hits"] += value
        elif cache in MISS_CACHE:
            out["misses"] += value
    return out


def events(level: Bucket) -> dict[str, float]:
    """The folder's persisted counters in a bucket, by event name."""
    return {dict(labels)["event"]: value for (name, labels), value in level.items()
            if name == "voxcache_cache_events_total"}


def _total(level: Bucket, name: str) -> float | None:
    values = [value for (sample_name, _), value in level.items() if sample_name == name]
    return sum(values) if values else None


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else float(f"{value:.{digits}g}")


@dataclass(slots=True)
class Digest:
    """What one bucket contributes to the charts (computed once per settled bucket)."""

    events: dict[str, float]
    histograms: dict[str, dict[float, float]]
    requests: dict[str, float] | None
    gauges: dict[str, float | None]
    saved: float | None


def digest(deltas: Bucket | None, level: Bucket | None) -> Digest:
    """One bucket's figures from its summed deltas and levels (either may be missing)."""
    level = level or {}
    saved = _total(deltas, "voxcache_render_seconds_saved_total") if deltas else None
    return Digest(
        events=events(level),
        histograms=histograms(deltas) if deltas else {},
        # A bucket some worker sampled but nobody was served in is 0 requests, not a gap.
        requests=requests(deltas or {}) if deltas is not None or level else None,
        gauges={"running": _total(level, "voxcache_renders_running"),
                "queued": _total(level, "voxcache_render_queue_depth"),
                "disk_bytes": _total(level, "voxcache_stored_bytes"),
                "memory_bytes": _total(level, "voxcache_memory_bytes")},
        saved=saved if saved is not None else (0.0 if deltas is not None or level else None))


class SeriesMemo:
    """Digests of settled buckets, so a poll reads and digests only the last few.

    A bucket is settled once every worker has published past it (three intervals later:
    a worker publishes at least once per interval); older buckets never change.
    """

    def __init__(self) -> None:
        self._settled: dict[int, Digest] = {}
        self._lock = threading.Lock()

    def digests(self, history: History, first: int, now: float) -> dict[int, Digest]:
        """Digests of the buckets from ``first`` on that hold anything."""
        settled_before = history.bucket_of(now - 3 * history.interval)
        with self._lock:
            self._settled = {b: d for b, d in self._settled.items() if b >= first}
            known = dict(self._settled)
        start = max([first, *(b + 1 for b in known)]) if known else first
        deltas, levels = history.buckets(start)
        fresh = {b: digest(deltas.get(b), levels.get(b)) for b in set(deltas) | set(levels)}
        with self._lock:
            self._settled.update({b: d for b, d in fresh.items() if b < settled_before})
        return {**known, **fresh}


def series(history: History, tiers: list[str], now: float,
           memo: SeriesMemo | None = None) -> dict[str, Any]:
    """Every chart's series over the window: ``t`` (bucket starts, unix seconds) and one
    list per line, ``None`` where a bucket has nothing to say."""
    step = max(1, round(history.interval * 1000))
    first = history.bucket_of(now - history.window)
    digests = (memo or SeriesMemo()).digests(history, first, now)
    times = list(range(min(digests), history.bucket_of(now) + 1, step)) if digests else []
    trailing = max(1, round(TRAILING_SECONDS / history.interval))
    empty = Digest({}, {}, None, {}, None)
    rows = [digests.get(t, empty) for t in times]
    out: dict[str, Any] = {"t": [t / 1000 for t in times], "trailing_seconds": TRAILING_SECONDS}
    hit_series: dict[str, list[float | None]] = {"all": [], **{tier: [] for tier in tiers}}
    lat: dict[str, list[float | None]] = {}
    per_second: dict[str, list[float | None]] = {}
    gauges: dict[str, list[float | None]] = {"running": [], "queued": [], "disk_bytes": [],
                                             "memory_bytes": [], "saved": []}
    window: dict[str, dict[float, float]] = {group: {} for group, _, _ in LATENCY_GROUPS}
    for i, row in enumerate(rows):
        for key, value in _hit_rates(rows, i, trailing, tiers).items():
            hit_series[key].append(value)
        _slide(window, row.histograms, 1.0)  # the trailing minute's latency, kept as a sum
        if i >= trailing:
            _slide(window, rows[i - trailing].histograms, -1.0)
        for key, value in latency([window]).items():
            lat.setdefault(key, []).append(_round(value))
        for key in ("hits", "misses", "refused", "errors"):
            per_second.setdefault(key, []).append(
                None if row.requests is None else _round(row.requests[key] / history.interval))
        for key in ("running", "queued", "disk_bytes", "memory_bytes"):
            gauges[key].append(row.gauges.get(key))
        gauges["saved"].append(_round(row.saved))
    out.update(hit_rate=hit_series, latency=lat, requests_per_second=per_second, **gauges)
    return out


def _hit_rates(rows: list[Digest], i: int, trailing: int, tiers: list[str]
               ) -> dict[str, float | None]:
    """The hit rate (overall and per tier) between the first bucket of the trailing minute
    that has the folder's counters and bucket ``i``."""
    blank: dict[str, float | None] = {key: None for key in ("all", *tiers)}
    now_counts = rows[i].events
    earlier = next((rows[j].events for j in range(max(0, i - trailing), i) if rows[j].events),
                   None)
    if earlier is None or not now_counts:
        return blank
    hits_now, misses_now = hits_and_misses(now_counts)
    hits_then, misses_then = hits_and_misses(earlier)
    gained = {tier: hits_now.get(tier, 0.0) - hits_then.get(tier, 0.0)
              for tier in set(hits_now) | set(hits_then)}
    lookups = sum(gained.values()) + misses_now - misses_then
    if lookups <= 0 or any(v < 0 for v in gained.values()):  # idle, or counters reset
        return blank
    return {"all": _round(sum(gained.values()) / lookups),
            **{tier: _round(gained.get(tier, 0.0) / lookups) for tier in tiers}}


def _slide(window: dict[str, dict[float, float]], counts: dict[str, dict[float, float]],
           sign: float) -> None:
    for group, bounds in counts.items():
        into = window[group]
        for bound, value in bounds.items():
            into[bound] = into.get(bound, 0.0) + sign * value


def recent(history: History, now: float, seconds: float = 300.0) -> dict[str, float | None]:
    """Latency quantiles and the hit rate of the last ``seconds`` (the headline figures)."""
    deltas, levels = history.buckets(history.bucket_of(now - seconds))
    figures = latency(histograms(bucket) for bucket in deltas.values())
    counted = [events(levels[t]) for t in sorted(levels) if events(levels[t])]
    figures["hit_rate"] = None
    if len(counted) >= 2:
        (hits_then, misses_then), (hits_now, misses_now) = (hits_and_misses(counted[0]),
                                                            hits_and_misses(counted[-1]))
        figures["hit_rate"] = hit_rate(sum(hits_now.values()) - sum(hits_then.values()),
                                       misses_now - misses_then)
    return {key: _round(value) for key, value in figures.items()}
