"""The disk tier's eviction policy: one score per entry, the lowest goes first.

``score = clock + log2(C × v)``: ``v`` the engine seconds a miss would cost again per MB
stored (GreedyDual-Size), ``C`` the asks with weights halving every ``1 / DECAY`` turnovers
(LRFU), ``clock`` the turnovers × ``DECAY`` — so a score never needs rewriting while idle and
victims come straight from the index. New takes enter on probation (``PROBATION``); evicted
keys leave ghosts (``GHOSTS_PER_ENTRY``) so a returning key keeps its earned frequency.
bench/suite/policies.py replays these functions; docs/internals/design.md, "Lifecycle".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

DECAY = 0.15
"""Halvings of an ask's weight per turnover of the tier (λ of LRFU, in turnovers)."""
PROBATION = 0.3
"""The weight of the first ask of a take never seen before: below any entry asked once in
the last ``log2(1 / PROBATION) / DECAY`` (12) turnovers. Chosen with ``DECAY`` on the
benchmark's traces at two seeds (``bench/suite/hitratio.py``): 0.1–0.5 all meet the goal there;
0.3 lifts the tightest cells (shifting popularity and the engine seconds of the cost-mixed
trace, both at 1% of the working set) without costing Zipf more than a tenth of a point."""
GHOSTS_PER_ENTRY = 2
"""Evicted keys remembered per stored entry (S3-FIFO keeps as many as its main queue)."""
LOW_WATERMARK = 0.98
"""After a write crosses a cap, evict down to this share of it: a round per 2% of the cap
written, so one-offs on probation get that long to be asked again."""
DEFAULT_SECONDS_PER_MB = {"encoded": 2.0}
"""What a stored MB cost to make when the entry does not say: an mp3 encode runs at
~0.24 s per MB of PCM here and is ~12% of its size (``docs/internals/benchmarks.md``)."""
DEFAULT_COST_PER_MB = 1.0
MIN_SECONDS = 1e-4
MAX_SECONDS = 3_600.0
"""The most one entry is credited with: no take or stage artifact costs an hour of engine
time, and an envelope claiming more (a pack from elsewhere) must not make it outlive
everything else."""


def take_seconds(meta: Mapping[str, Any]) -> float:
    """The engine seconds an entry's envelope says it cost (0.0: not recorded).

    Only a JSON number is a cost: a string ("1e9"), a bool, NaN, infinity, zero or a
    negative value is no record at all (an envelope from elsewhere: never trust a type),
    and a claim above ``MAX_SECONDS`` is held to it."""
    for name in ("render_seconds", "compute_seconds"):
        seconds = meta.get(name)
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            continue
        if seconds > 0 and math.isfinite(seconds):
            return min(float(seconds), MAX_SECONDS)
    return 0.0


def value_per_mb(seconds: float, size: int, kind: str = "") -> float:
    """Engine seconds per stored MB: what keeping one more MB of this entry saves."""
    megabytes = max(size, 1) / 1e6
    if seconds <= 0 or not math.isfinite(seconds):
        return DEFAULT_SECONDS_PER_MB.get(kind, DEFAULT_COST_PER_MB)
    return max(seconds, MIN_SECONDS) / megabytes


def score(previous: float | None, asks: int, seconds: float, size: int, clock: float,
          kind: str = "") -> float:
    """The score after ``asks`` more asks at ``clock`` (``previous``: the entry's score, or
    its ghost's; None for a take never seen, which enters on probation)."""
    value = value_per_mb(seconds, size, kind)
    weight = asks if asks > 0 else (0.0 if previous is not None else PROBATION)
    if previous is None:
        return clock + math.log2(weight * value)
    if weight == 0:
        return previous
    # clock + log2(weight·v + 2^(previous − clock)), without overflow either way
    fresh, kept = math.log2(weight * value), previous - clock
    high, low = max(fresh, kept), min(fresh, kept)
    return clock + high + math.log2(1.0 + 2.0 ** (low - high))


def advance(clock: float, freed: float, cap: float) -> float:
    """The clock after evicting ``freed`` of a cap of ``cap`` (bytes or entries)."""
    return clock + DECAY * freed / cap if cap > 0 else clock
