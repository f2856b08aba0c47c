"""Seed policy: what an unseeded request gets from a sampling engine.

An explicit seed is in the key. Without one: ``pin`` (default) keeps the first take for
everyone; ``bypass`` always renders, never stores; ``variants:N[:random]`` keeps up to N
takes served in rotation. Take 0 is stored under the request key itself (switching
policies keeps it), take i>0 under ``derived_key(key, "take", n=i)``. docs/operating/service.md.
"""

from __future__ import annotations

import functools
import itertools
import random
import threading
from dataclasses import dataclass, replace

from ..audio import Audio
from ..engine import joined
from ..entry import audio_entry
from ..errors import InvalidParameter
from ..key import derived_key
from ..outcome import NO_PROGRESS, Progress, Result, seconds_since
from ..resolved import ResolvedRequest
from .pipeline import Pipeline

MAX_VARIANTS = 64
_COUNTERS_MAX = 100_000


@dataclass(frozen=True, slots=True)
class SeedPolicy:
    """A parsed seed policy."""

    mode: str
    """``pin``, ``bypass`` or ``variants``."""
    n: int = 1
    order: str = "rotate"

    def __str__(self) -> str:
        if self.mode != "variants":
            return self.mode
        return f"variants:{self.n}" + (":random" if self.order == "random" else "")


@functools.lru_cache(maxsize=64)
def parse_seed_policy(text: str) -> SeedPolicy:
    """Parse ``pin``, ``bypass``, ``variants:N`` or ``variants:N:random``."""
    parts = text.strip().lower().split(":") if isinstance(text, str) else [""]
    if parts in (["pin"], ["bypass"]):
        return SeedPolicy(parts[0])
    if parts[0] == "variants" and len(parts) in (2, 3) and parts[1].isdigit():
        n = int(parts[1])
        order = parts[2] if len(parts) == 3 else "rotate"
        if 1 <= n <= MAX_VARIANTS and order in ("rotate", "random"):
            return SeedPolicy("variants", n, order)
    raise InvalidParameter(
        f"seed policy {text!r} is not understood; use pin, bypass, variants:N or "
        f"variants:N:random (N from 1 to {MAX_VARIANTS})")


def applies(resolved: ResolvedRequest) -> bool:
    """The policy only governs unseeded requests (an explicit seed is in the key)."""
    return resolved.seed is None


def take_key(key: str, index: int) -> str:
    """Where take ``index`` of a request is stored (take 0 is the request key itself)."""
    return key if index == 0 else derived_key(key, "take", n=index)


class TakePools:
    """Serve unseeded requests under the ``bypass`` and ``variants`` policies."""

    def __init__(self) -> None:
        self._counters: dict[str, itertools.count[int]] = {}
        self._lock = threading.Lock()

    def serve(self, pipeline: Pipeline, resolved: ResolvedRequest, key: str,
              policy: SeedPolicy, started: float, progress: Progress = NO_PROGRESS) -> Result:
        """Return a take of ``resolved`` as ``policy`` says."""
        if policy.mode == "bypass":
            return bypass(pipeline, resolved, key, started, progress)
        keys = [take_key(key, i) for i in range(policy.n)]
        for i, k in enumerate(keys):
            if pipeline.lookup(k) is None:  # the pool is not full yet: a new take for this caller
                return replace(pipeline.render_once(resolved, k, started, progress), take=i)
        i = self._next(key, policy)
        found = pipeline.lookup(keys[i])
        if found is None:  # evicted since the probe: render it again
            return replace(pipeline.render_once(resolved, keys[i], started, progress), take=i)
        return replace(pipeline.hit(resolved, keys[i], found, started), take=i)

    def _next(self, key: str, policy: SeedPolicy) -> int:
        if policy.order == "random":
            return random.randrange(policy.n)
        with self._lock:
            counter = self._counters.get(key)
            if counter is None:
                if len(self._counters) >= _COUNTERS_MAX:
                    self._counters.clear()
                counter = self._counters[key] = itertools.count()
            return next(counter) % policy.n


def bypass(pipeline: Pipeline, resolved: ResolvedRequest, key: str, started: float,
           progress: Progress = NO_PROGRESS) -> Result:
    """Render a fresh take and store nothing (the ``bypass`` policy and cache mode)."""
    progress.begin("bypass", "engine")
    chunks = []
    for chunk in joined(pipeline.render(resolved), pipeline.engine.segment_gap):
        chunks.append(chunk)
        progress.chunk(chunk)
    pipeline.count("bypasses")
    entry = audio_entry(key, Audio.join(chunks), meta=resolved.describe())
    return Result(entry, key, "bypass", "engine", seconds_since(started), stored=False)


def describe(resolved: ResolvedRequest, key: str, policy: SeedPolicy) -> dict[str, object]:
    """What ``explain`` says about the seed policy of a request."""
    if not applies(resolved):
        return {"policy": "explicit-seed", "configured": str(policy),
                "note": "the seed is part of the key; no policy applies"}
    info: dict[str, object] = {"policy": str(policy)}
    if policy.mode == "variants":
        info["take_keys"] = [take_key(key, i) for i in range(policy.n)]
    elif policy.mode == "bypass":
        info["note"] = "always rendered, never stored"
    return info
