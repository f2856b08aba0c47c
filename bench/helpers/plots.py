"""Small plotting helpers (matplotlib, Agg backend) so every benchmark's figure looks alike."""

from __future__ import annotations

from typing import Any


def grouped_bars(groups: list[str], series: dict[str, list[float]], ylabel: str, title: str,
                 log: bool = True) -> Any:
    """One cluster of bars per group (e.g. entry size), one bar per subject."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, values, width, label=label)
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(axis="y", alpha=0.3)
    return fig


def lines(xs: list[float], series: dict[str, list[float]], xlabel: str, ylabel: str,
          title: str, logx: bool = False, logy: bool = False) -> Any:
    """One line per subject over a shared x axis."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, values in series.items():
        ax.plot(xs, values, marker="o", label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return fig
