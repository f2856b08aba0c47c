"""The stage caches' persisted counters read per kind: what ``voxcache stats`` and ``/metrics``
show.

``StageCache`` counts into the cache folder's counters as ``stage_<kind>_<name>``
(``hits``, ``misses``, ``joins``, ``bytes`` written, ``saved_us`` — on each hit, the
extractor time recorded in the entry — and ``compute_us``), so every process sharing
the folder adds to one total. This turns them back into figures per kind, times in
seconds, every kind present (zero when nothing happened).
"""

from __future__ import annotations

from collections.abc import Mapping

from .cache import STAGE_KINDS

EVENTS = ("hits", "misses", "joins")
"""Lookups by outcome: answered from a tier, extracted, or shared with another caller's
extraction (here or in another process)."""
MICROSECONDS = {"saved_us": "saved_seconds", "compute_us": "compute_seconds"}


def stage_figures(counters: Mapping[str, int | float]) -> dict[str, dict[str, float]]:
    """Per kind: ``hits``, ``misses``, ``joins``, ``bytes`` (written), ``saved_seconds``
    (extractor time the hits did not spend) and ``compute_seconds`` (extractor time spent),
    from ``Cache.stats()["counters"]``."""
    figures = {kind: {**{event: 0.0 for event in EVENTS}, "bytes": 0.0, "saved_seconds": 0.0,
                      "compute_seconds": 0.0} for kind in STAGE_KINDS}
    for name, value in counters.items():
        kind, _, counter = name.removeprefix("stage_").partition("_")
        if not name.startswith("stage_") or kind not in figures or not counter:
            continue
        if counter in MICROSECONDS:
            figures[kind][MICROSECONDS[counter]] += value / 1e6
        else:
            figures[kind][counter] = figures[kind].get(counter, 0.0) + value
    return figures


def is_stage_counter(name: str) -> bool:
    """Whether a persisted counter is one of the stage caches' (shown per kind instead)."""
    kind, _, counter = name.removeprefix("stage_").partition("_")
    return name.startswith("stage_") and kind in STAGE_KINDS and bool(counter)
