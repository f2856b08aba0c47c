"""Interleaved repeated trials: the one way every headline ratio is measured.

A single run cannot tell a 0.9 from a 0.7 on a shared host: the baselines themselves swing.
So subject and baseline take turns, round after round (the order flipping each round, so a
drift costs both alike), warm-up rounds are thrown away, and the ratio is reported as the
median of the per-round ratios with its spread (IQR and min–max) and the host's load.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

STABLE = 0.05
"""A ratio is called stable when every round lies within ±5 % of the median."""


def load() -> float:
    """The one-minute load average (NaN where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def rounds(calls: dict[str, Callable[[], float]], count: int,
           warmup: int = 1) -> dict[str, list[float]]:
    """Each call once per round, ``count`` rounds after ``warmup`` unrecorded ones; the order
    flips every round. Each call returns its own figure (seconds per call, requests/s)."""
    names = list(calls)
    figures: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup + count):
        order = names if index % 2 == 0 else names[::-1]
        for name in order:
            value = calls[name]()
            if index >= warmup:
                figures[name].append(value)
    return figures


@dataclass(frozen=True, slots=True)
class Summary:
    """Per-round ratios of a subject to its baseline, and the load around them."""

    ratios: tuple[float, ...]
    subject: float
    """The subject's median figure over the rounds."""
    baseline: float
    load_before: float
    load_after: float

    @classmethod
    def of(cls, subject: list[float], baseline: list[float], load_before: float = float("nan"),
           load_after: float = float("nan")) -> Summary:
        """Pair the rounds' figures (round i of the subject with round i of the baseline);
        a round missing either figure (NaN, or a zero baseline) is left out."""
        pairs = [(s, b) for s, b in zip(subject, baseline, strict=True)
                 if b and not math.isnan(s) and not math.isnan(b)]
        if not pairs:
            return cls((), math.nan, math.nan, load_before, load_after)
        return cls(tuple(s / b for s, b in pairs), statistics.median(s for s, _ in pairs),
                   statistics.median(b for _, b in pairs), load_before, load_after)

    @property
    def median(self) -> float:
        return statistics.median(self.ratios) if self.ratios else float("nan")

    @property
    def iqr(self) -> tuple[float, float]:
        """First and third quartiles (the extremes when there are fewer than four rounds)."""
        if len(self.ratios) < 4:
            return (min(self.ratios, default=float("nan")), max(self.ratios, default=float("nan")))
        q = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return (q[0], q[2])

    @property
    def stable(self) -> bool:
        """Every round within ±5 % of the median (and at least three rounds to say so)."""
        m = self.median
        return len(self.ratios) >= 3 and all(abs(r - m) <= STABLE * m for r in self.ratios)

    def spread(self) -> str:
        """``IQR a–b, range c–d`` for a table cell."""
        if not self.ratios:
            return "no round measured"
        lo, hi = self.iqr
        return (f"IQR {lo:.3g}–{hi:.3g}, range {min(self.ratios):.3g}–{max(self.ratios):.3g} "
                f"({len(self.ratios)} rounds)")

    def record(self) -> dict[str, object]:
        """The figures a headline entry carries (and results.json keeps)."""
        lo, hi = self.iqr
        return {"value": self.median, "rounds": list(self.ratios), "iqr": [lo, hi],
                "min": min(self.ratios, default=math.nan),
                "max": max(self.ratios, default=math.nan), "stable": self.stable,
                "spread": self.spread(), "load": [self.load_before, self.load_after]}


def interleave(subject: Callable[[], float], baseline: Callable[[], float], count: int,
               warmup: int = 1) -> Summary:
    """Subject and baseline alternated for ``count`` rounds; their per-round ratios."""
    before = load()
    figures = rounds({"subject": subject, "baseline": baseline}, count, warmup)
    return Summary.of(figures["subject"], figures["baseline"], before, load())


def per_call(call: Callable[[], object], n: int) -> list[float]:
    """Time ``n`` calls one by one (seconds each): the one timing loop of the benchmarks."""
    clock = time.perf_counter
    samples = []
    for _ in range(n):
        started = clock()
        call()
        samples.append(clock() - started)
    return samples


def batch_median(call: Callable[[], object], n: int) -> Callable[[], float]:
    """A trial that times ``n`` calls one by one and returns their median (seconds)."""
    return lambda: statistics.median(per_call(call, n))


def batch_cpu(call: Callable[[], object], n: int) -> Callable[[], float]:
    """A trial that runs ``n`` calls and returns the CPU seconds this thread spent per call
    (user + system): time the scheduler gave to other processes is not counted, so the
    figure moves little with the host's load (a mean, where ``batch_median`` is a median)."""

    def trial() -> float:
        started = time.thread_time()
        for _ in range(n):
            call()
        return (time.thread_time() - started) / n

    return trial
