"""The benchmarks, in the order a full run takes them (misses before hitratio: it hands over
Piper's measured seconds per character; the shared tiers and the nodes last)."""

from __future__ import annotations

from types import ModuleType

from . import cluster, hitratio, http, keycost, lookup, misses, remote_tiers, scale, stampede
from . import inline_candidates as inline

BENCHMARKS: dict[str, ModuleType] = {
    m.NAME: m for m in (lookup, inline, keycost, misses, stampede, hitratio, scale, http,
                        remote_tiers, cluster)
}
