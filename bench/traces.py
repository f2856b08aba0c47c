"""Synthetic request traces with the popularity skew TTS operators report.

An item is one phrase/voice/instruct combination: its size in bytes and its engine
seconds both follow from its length in characters (the audio per character and Piper's
seconds per character are measured, not guessed). Requests are spread evenly over one day,
because voxcache's eviction score mixes recency (seconds) with frequency (an hour per
doubling of hits), so the time scale of a trace matters as much as its order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DAY = 86_400.0
AUDIO_BYTES_PER_CHAR = 2_070
"""16-bit PCM at 22.05 kHz: Piper's joe-medium speaks ~0.047 s per character."""


@dataclass(frozen=True)
class Trace:
    """Requests (item ids and times) and what each item weighs."""

    name: str
    items: np.ndarray
    times: np.ndarray
    chars: np.ndarray
    sizes: np.ndarray

    @property
    def working_set_bytes(self) -> int:
        """Bytes of every distinct item the trace asks for (what an infinite cache holds)."""
        return int(self.sizes[np.unique(self.items)].sum())


def catalog(n_items: int, rng: np.random.Generator) -> np.ndarray:
    """Characters per item: short prompts to long paragraphs (log-normal, median ~60)."""
    return np.clip(rng.lognormal(np.log(60), 0.8, n_items), 8, 1_500).astype(np.int64)


def _build(name: str, items: np.ndarray, chars: np.ndarray, bytes_per_char: int) -> Trace:
    times = np.linspace(0.0, DAY, len(items), endpoint=False)
    return Trace(name, items.astype(np.int64), times, chars, chars * bytes_per_char)


def skewed(n_events: int, n_items: int, seed: int = 1, hot_share: float = 0.15,
           hot_traffic: float = 0.70, bytes_per_char: int = AUDIO_BYTES_PER_CHAR) -> Trace:
    """70% of requests on 15% of the combinations, uniform within each group."""
    rng = np.random.default_rng(seed)
    chars = catalog(n_items, rng)
    n_hot = max(1, int(n_items * hot_share))
    hot = rng.random(n_events) < hot_traffic
    items = np.where(hot, rng.integers(0, n_hot, n_events),
                     rng.integers(n_hot, n_items, n_events))
    order = rng.permutation(n_items)  # so that hot items have random lengths
    return _build("70/15 skew", order[items], chars, bytes_per_char)


def zipf(n_events: int, n_items: int, alpha: float = 0.9, seed: int = 2,
         bytes_per_char: int = AUDIO_BYTES_PER_CHAR) -> Trace:
    """Pure Zipf popularity over the catalogue (rank r asked ∝ 1/r^alpha)."""
    rng = np.random.default_rng(seed)
    chars = catalog(n_items, rng)
    weights = 1.0 / np.arange(1, n_items + 1) ** alpha
    items = rng.choice(n_items, size=n_events, p=weights / weights.sum())
    return _build(f"Zipf α={alpha}", rng.permutation(n_items)[items], chars, bytes_per_char)


def with_scan(base: Trace, share: float = 0.5, seed: int = 3,
              bytes_per_char: int = AUDIO_BYTES_PER_CHAR) -> Trace:
    """The skewed trace with a one-off scan: in its middle third, ``share`` of the requests
    are unique sentences asked once (a batch job reading a book aloud)."""
    rng = np.random.default_rng(seed)
    items = base.items.copy()
    n = len(items)
    lo, hi = n // 3, 2 * n // 3
    scan = np.flatnonzero(rng.random(hi - lo) < share) + lo
    first_new = len(base.chars)
    items[scan] = np.arange(first_new, first_new + len(scan))
    chars = np.concatenate([base.chars, catalog(len(scan), rng)])
    return _build(f"{base.name} + one-off scan", items, chars, bytes_per_char)


def next_use(items: np.ndarray) -> np.ndarray:
    """For each request, the index of the next request for the same item (or ``len``)."""
    n = len(items)
    order = np.argsort(items, kind="stable")
    out = np.full(n, n, dtype=np.int64)
    same = items[order[1:]] == items[order[:-1]]
    out[order[:-1][same]] = order[1:][same]
    return out
