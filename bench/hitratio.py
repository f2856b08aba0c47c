"""Benchmark 5: hit ratio against the optimum, by cache size, on three synthetic traces.

The policies are simulated in memory (millions of requests through SQLite would measure
SQLite, not the policy); voxcache's is its own ``score`` function and watermark. One
smaller trace then goes through the real ``Cache`` with ``disk_max_bytes`` and a trace
clock, to confirm that the simulation is the policy voxcache actually runs.
"""

from __future__ import annotations

import contextlib
from typing import Any

import blake3
import numpy as np

from voxcache.cache import Cache, CacheConfig

from . import traces
from .core import Context, ratio
from .fixtures import entry_of_size
from .policies import EPOCH, POLICIES, voxcache_policy
from .traces import Trace

NAME = "hitratio"
TITLE = "5. Hit ratio against the optimum (Belady)"

FRACTIONS = (0.01, 0.05, 0.10, 0.25)
DEFAULT_PIPER = (0.162, 0.0054)
"""Seconds per request and per character, fitted from Piper in an earlier run (misses)."""


def engine_seconds(ctx: Context, chars: np.ndarray) -> np.ndarray:
    """Render time per item, from Piper's measured cost (this run's, when misses ran first)."""
    per_char, fixed = ctx.shared.get("piper_seconds_per_char", (DEFAULT_PIPER[1],
                                                                 DEFAULT_PIPER[0]))
    return fixed + per_char * chars


def make_traces(ctx: Context) -> list[Trace]:
    """The three traces, sized for the run."""
    events, items = ctx.pick((50_000, 5_000), (1_000_000, 50_000))
    skew = traces.skewed(events, items)
    return [skew, traces.zipf(events, items), traces.with_scan(skew)]


def simulate(ctx: Context, trace: Trace) -> list[dict[str, Any]]:
    """Every policy at every size on one trace."""
    seconds = engine_seconds(ctx, trace.chars)
    total_seconds = float(seconds[trace.items].sum())
    rows = []
    for fraction in FRACTIONS:
        capacity = int(trace.working_set_bytes * fraction)
        outcomes = {name: policy(trace, capacity) for name, policy in POLICIES.items()}
        best = outcomes["Belady (optimal)"].hit_ratio()
        for name, outcome in outcomes.items():
            saved = outcome.seconds_saved(trace, seconds)
            rows.append({"trace": trace.name, "size": f"{fraction:.0%}", "policy": name,
                         "hit ratio": outcome.hit_ratio(),
                         "byte hit ratio": outcome.byte_hit_ratio(trace),
                         "÷ Belady": ratio(outcome.hit_ratio(), best),
                         "engine hours saved": saved / 3600,
                         "% of engine time saved": 100 * saved / total_seconds})
    return rows


def confirm(ctx: Context) -> list[dict[str, Any]]:
    """Replay a small trace through the real Cache and through the simulation; compare."""
    events, items = ctx.pick((3_000, 400), (20_000, 2_500))
    small = traces.skewed(events, items, seed=7, bytes_per_char=20)
    keys = [blake3.blake3(f"item-{i}".encode()).hexdigest() for i in range(len(small.chars))]
    entries = [entry_of_size(keys[i], int(small.sizes[i])) for i in range(len(keys))]
    trace = Trace(small.name, small.items, small.times, small.chars,
                  np.array([e.size for e in entries], dtype=np.int64))
    rows = []
    for fraction in (0.05, 0.25):
        capacity = int(trace.working_set_bytes * fraction)
        simulated = voxcache_policy(trace, capacity).hit_ratio()
        real = replay_real(ctx, trace, entries, keys, capacity, fraction)
        rows.append({"trace": f"{trace.name}, {events:,} requests, {items:,} items",
                     "size": f"{fraction:.0%}", "real Cache hit ratio": real,
                     "simulated hit ratio": simulated, "difference": real - simulated})
    return rows


def replay_real(ctx: Context, trace: Trace, entries: list, keys: list[str], capacity: int,
                fraction: float) -> float:
    """Run the trace through ``Cache`` (memory tier off) on the trace's clock."""
    now = [EPOCH]
    config = CacheConfig(memory_default_budget=0, disk_max_bytes=capacity)
    hits = 0
    with contextlib.ExitStack() as stack:
        cache = Cache(ctx.scratch(f"real-{fraction}"), config, clock=lambda: now[0])
        stack.callback(cache.close)
        check = getattr(cache.disk, "startup_check", None)
        if check is not None:
            check.join()
        for item, t in zip(trace.items.tolist(), trace.times.tolist(), strict=True):
            now[0] = EPOCH + t
            if cache.get(keys[item]) is not None:
                hits += 1
            else:
                cache.put(entries[item])
    return hits / len(trace.items)


def run(ctx: Context) -> None:
    """Simulate, confirm, tabulate, plot."""
    all_rows: list[dict[str, Any]] = []
    for trace in make_traces(ctx):
        all_rows += simulate(ctx, trace)
    per_char, fixed = ctx.shared.get("piper_seconds_per_char", (DEFAULT_PIPER[1],
                                                                 DEFAULT_PIPER[0]))
    ctx.table("policies", "Hit ratio by policy, trace and cache size (share of the working set)",
              all_rows, notes=[
                  f"Engine time per miss: {fixed * 1e3:.0f} ms + {per_char * 1e3:.2f} ms per "
                  "character (Piper, fitted by the misses benchmark); item sizes "
                  f"{traces.AUDIO_BYTES_PER_CHAR} B per character; requests spread over one day.",
                  "LFU counts hits since admission; Belady evicts the furthest next use "
                  "(admission included)."])
    ctx.table("confirm", "The simulation against the real Cache (disk_max_bytes, trace clock)",
              confirm(ctx))
    headline = next(r for r in all_rows if r["trace"] == "70/15 skew" and r["size"] == "5%"
                    and r["policy"] == "voxcache")
    lru_row = next(r for r in all_rows if r["trace"] == "70/15 skew" and r["size"] == "5%"
                   and r["policy"] == "LRU")
    ctx.headline["hit ratio ÷ Belady (70/15 skew, 5% size)"] = {
        "value": headline["÷ Belady"],
        "detail": f"voxcache {headline['hit ratio']:.3f}, LRU {lru_row['hit ratio']:.3f} "
                  f"(÷ Belady {lru_row['÷ Belady']:.2f})"}
    plot(ctx, all_rows)


def plot(ctx: Context, rows: list[dict[str, Any]]) -> None:
    """One panel per trace: hit ratio against cache size, one line per policy."""
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["trace"] for r in rows))
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 4), sharey=True)
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        for policy in POLICIES:
            ys = [r["hit ratio"] for r in rows if r["trace"] == name and r["policy"] == policy]
            ax.plot([f * 100 for f in FRACTIONS], ys, marker="o", label=policy)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("cache size, % of working set")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("hit ratio")
    np.atleast_1d(axes)[0].legend(fontsize=8)
    ctx.plot("hit-ratio", fig)
