"""What every benchmark shares: timing, summary statistics, and the context that collects figures.

A benchmark module exposes ``NAME``, ``TITLE`` and ``run(ctx)``; it records tables of
figures with ``ctx.table`` and plots with ``ctx.plot``. Figures are kept as plain dicts so
the JSON file holds every number the markdown and the plots were drawn from.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .trials import Summary, per_call


@dataclass(frozen=True, slots=True)
class Stats:
    """Median and tail of repeated measurements, in seconds."""

    median: float
    p99: float
    mean: float
    n: int

    @classmethod
    def of(cls, samples: Iterable[float]) -> Stats:
        """Summarise samples (nearest-rank p99, so it is an observed value)."""
        values = sorted(samples)
        if not values:
            return cls(math.nan, math.nan, math.nan, 0)
        rank = max(0, math.ceil(0.99 * len(values)) - 1)
        return cls(statistics.median(values), values[rank], statistics.fmean(values),
                   len(values))

    def us(self) -> dict[str, float]:
        """The figures in microseconds, for tables."""
        return {"median_us": self.median * 1e6, "p99_us": self.p99 * 1e6, "n": self.n}

    def ms(self) -> dict[str, float]:
        """The figures in milliseconds, for tables."""
        return {"median_ms": self.median * 1e3, "p99_ms": self.p99 * 1e3, "n": self.n}


def sample(fn: Callable[[], Any], repeats: int, warmup: int = 3) -> Stats:
    """Time ``fn`` call by call; each sample is one call, so the p99 is a real tail."""
    for _ in range(warmup):
        fn()
    return Stats.of(per_call(fn, repeats))


def ratio(value: float, baseline: float) -> float:
    """``value / baseline``, NaN when the baseline is missing or zero."""
    if not baseline or math.isnan(baseline) or math.isnan(value):
        return math.nan
    return value / baseline


@dataclass
class Table:
    """One table of figures: rows of dicts with the same columns."""

    bench: str
    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)


@dataclass
class Context:
    """What a benchmark run gives each benchmark and collects from it."""

    quick: bool
    out: Path
    work: Path
    """A scratch folder (deleted after the run)."""
    tables: list[Table] = field(default_factory=list)
    plots: list[tuple[str, Path]] = field(default_factory=list)
    notes: dict[str, list[str]] = field(default_factory=dict)
    headline: dict[str, Any] = field(default_factory=dict)
    """The few ratios the project tracks, by name (see README of the suite)."""
    shared: dict[str, Any] = field(default_factory=dict)
    """Measurements one benchmark hands to a later one (e.g. Piper seconds per character)."""
    current: str = ""
    repeat: int = 5
    """Rounds of every interleaved headline ratio (``--repeat``; a CI smoke run keeps 1–2)."""

    def pick(self, quick: Any, full: Any) -> Any:
        """Return the quick or the full setting."""
        return quick if self.quick else full

    def table(self, name: str, title: str, rows: list[dict[str, Any]],
              columns: list[str] | None = None, notes: list[str] | None = None) -> Table:
        """Record a table of figures for the current benchmark."""
        cols = columns or (list(rows[0]) if rows else [])
        table = Table(self.current, name, title, cols, rows, list(notes or []))
        self.tables.append(table)
        return table

    def trials(self, name: str, summary: Summary, detail: str) -> None:
        """Record a headline ratio measured as interleaved trials (``bench.helpers.trials``)."""
        self.headline[name] = {**summary.record(), "detail": detail}

    def note(self, text: str) -> None:
        """Record a note for the current benchmark (skips, caveats)."""
        self.notes.setdefault(self.current, []).append(text)
        print(f"  note: {text}", flush=True)

    def plot(self, name: str, figure: Any) -> Path:
        """Save a matplotlib figure as ``<out>/<bench>-<name>.png``."""
        import matplotlib.pyplot as plt

        path = self.out / f"{self.current}-{name}.png"
        figure.tight_layout()
        figure.savefig(path, dpi=110)
        plt.close(figure)
        self.plots.append((self.current, path))
        return path

    def scratch(self, name: str) -> Path:
        """A fresh folder under the run's scratch space."""
        path = self.work / self.current / name
        path.mkdir(parents=True, exist_ok=True)
        return path
