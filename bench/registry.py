"""The benchmarks, in the order a full run takes them (misses before hitratio: it hands over
Piper's measured seconds per character)."""

from __future__ import annotations

from types import ModuleType

from . import hitratio, http, keycost, lookup, misses, scale, stampede

BENCHMARKS: dict[str, ModuleType] = {
    m.NAME: m for m in (lookup, keycost, misses, stampede, hitratio, scale, http)
}
