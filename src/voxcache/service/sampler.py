"""Each worker's background sampler: one publication to the shared history per interval.

Scrapes and dashboard polls publish too, but a quiet service is polled by nobody,
and its charts must still show that it was quiet (and how full its disk was). So
every worker wakes at each bucket boundary (plus a tenth of an interval, so the
buckets of all workers line up), publishes its counters and gauges and the cache
folder's own figures, and now and then trims the ring to its window. On shutdown
it publishes once more, so what a worker served before it stopped is counted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..cache import Cache
from ..config import Settings
from ..errors import InvalidParameter
from ..vocabulary import TierName
from .history import SAMPLER_WAIT, History, HistoryUnavailable, Sample, sample
from .metrics import Metrics

log = logging.getLogger("voxcache.service")

TRIM_EVERY = 12
"""Ticks between trims of the ring (and folds of exited workers)."""


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """The ``[dashboard]`` table: how often workers sample and how much history is kept."""

    interval: float = 5.0
    """Seconds per sample (one bucket of the charts)."""
    window: float = 3600.0
    """Seconds of history kept (the ring's length)."""


DEFAULTS = DashboardSettings()


def dashboard_settings(settings: Settings) -> DashboardSettings:
    """``[dashboard] interval`` and ``window`` (``VOXCACHE_DASHBOARD_INTERVAL``/``_WINDOW``
    override them), checked: an interval of 0.5–60 s, a window of 1 minute to 1 day."""
    table: dict[str, Any] = dict(settings.extra.get("dashboard", {}))
    unknown = set(table) - {"interval", "window"}
    if unknown:
        raise InvalidParameter(f"[dashboard] has unknown setting(s) {', '.join(sorted(unknown))}"
                               "; it takes interval and window (seconds)")
    for name in ("interval", "window"):
        env = os.environ.get(f"VOXCACHE_DASHBOARD_{name.upper()}")
        if env is not None:
            table[name] = env
    values = {}
    for name, low, high in (("interval", 0.5, 60.0), ("window", 60.0, 86400.0)):
        raw = table.get(name, getattr(DEFAULTS, name))
        try:
            value = float(raw)
        except (TypeError, ValueError):
            value = float("nan")
        if not low <= value <= high:  # NaN fails too
            raise InvalidParameter(f"[dashboard] {name} must be {low:g} to {high:g} seconds, "
                                   f"got {raw!r}")
        values[name] = value
    return DashboardSettings(**values)


def folder_figures(cache: Cache) -> dict[Sample, float]:
    """The cache folder's persisted counters and disk totals (the same for every worker)."""
    stats = cache.stats()
    figures = {sample("voxcache_cache_events_total", event=name): float(value)
               for name, value in stats["counters"].items()}
    disk = stats["tiers"][TierName.DISK]
    if disk["bytes"] is not None:
        figures[sample("voxcache_stored_bytes", tier=TierName.DISK)] = float(disk["bytes"])
        figures[sample("voxcache_stored_entries", tier=TierName.DISK)] = float(disk["entries"])
    return figures


class Sampler:
    """A daemon thread publishing this worker's figures once per interval."""

    def __init__(self, metrics: Metrics, history: History, cache: Cache) -> None:
        self.metrics = metrics
        self.history = history
        self.cache = cache
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.ticks = 0

    def start(self) -> None:
        """Start sampling (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="voxcache-sampler",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop, then publish what was counted since the last tick."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.tick(trim=False)

    def tick(self, trim: bool | None = None) -> None:
        """Publish once; faults are counted and logged by the history and never raised."""
        try:
            self.history.publish(self.metrics.process_counters(), self.metrics.process_gauges(),
                                 folder_figures(self.cache), wait=SAMPLER_WAIT)
            self.ticks += 1
            if trim if trim is not None else self.ticks % TRIM_EVERY == 1:
                self.history.trim()
        except HistoryUnavailable:
            pass

    def _run(self) -> None:
        self.tick()  # a baseline at once: the first requests' rates are measured from it
        interval = self.history.interval
        while True:
            now = time.time()
            delay = interval - (now % interval) + interval / 10
            if self._stop.wait(delay):
                return
            try:
                self.tick()
            except Exception:  # a sampler must never take a worker down
                log.exception("dashboard sampler: a tick failed")
