"""A take's recipe for the load-once path (``loading.Recipe``): what a take is made of.

Found inside the lock, or for a whole request an older model's take (stale-while-
revalidate) or a stitch of stored sentences or clauses, else the engine's render under its
join rule; then the storing gate, publication, and what a joiner is handed.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Protocol

from .audio import Audio
from .engine import joined
from .entry import Entry
from .loading import Made
from .outcome import NO_PROGRESS, Progress, Result, seconds_since
from .policies import clauses
from .policies.admit import Gate
from .policies.pipeline import Pipeline
from .policies.upgrades import Upgrades
from .resolved import ResolvedRequest
from .vocabulary import Outcome


class Orchestrator(Pipeline, Protocol):
    """The orchestrator as its take recipe sees it: the pipeline, its gate and policies."""

    gate: Gate
    upgrades: Upgrades
    segments: bool | str


class TakeRecipe:
    """What a take is made of, for the load-once path (``loading.Recipe``): a stored take
    found inside the lock, or — for a whole request — an older model's take
    (stale-while-revalidate) or a stitch of stored sentences, else the engine's render
    under the engine's join rule."""

    def __init__(self, engine: Orchestrator, resolved: ResolvedRequest, key: str,
                 started: float, progress: Progress, *, whole_request: bool,
                 caller: str | None = None, refusal: str | None = None) -> None:
        self.engine = engine
        self.resolved = resolved
        self.key = key
        self.started = started
        self.progress = progress
        self.whole_request = whole_request
        self.caller = caller
        self.refusal = refusal
        """Why the take will not be stored, as known before it exists (a text rule, too
        few callers): it is said in ``begin``, so a stream's headers carry it."""
        self._rendered: Audio | None = None
        """The engine's take made here (the quality gate checks it; a stitch of stored or
        separately checked sentences is not checked again)."""

    def found(self, entry: Entry, tier: str, inside_lock: bool) -> Result | None:
        """A stored take: a hit, or (inside the lock) one another process or node stored
        while this caller waited for it."""
        if not inside_lock:
            return self.engine.hit(self.resolved, self.key, (entry, tier), self.started)
        self.engine.count("joins")
        self.progress.begin(Outcome.JOINED, tier)
        self.progress.chunk(entry.audio())
        return Result(entry, self.key, Outcome.JOINED, tier, seconds_since(self.started))

    def make(self, sink: Progress) -> Made[Result]:
        engine, resolved, key = self.engine, self.resolved, self.key
        if self.whole_request:
            stale = engine.upgrades.serve_stale(engine, resolved, key, self.started)
            if stale is not None:
                sink.begin(Outcome.STALE, stale.tier)
                sink.chunk(stale.audio)
                return Made(stale)
        if self.refusal is None:  # inside the lock, for a take that is really made here
            self.refusal = engine.gate.before(key, resolved, self.caller)
        if self.whole_request and engine.segments:
            served = clauses.serve_mode(engine, engine.segments, resolved, key, self.started,
                                        sink, self.refusal, self.caller)
            if served is not None:  # a take with clause joins is not stored whole
                return Made(served[0], served[0].entry if served[1] else None,
                            resolved.tenant)
        return self._render(sink)

    def _render(self, sink: Progress) -> Made[Result]:
        engine, resolved = self.engine, self.resolved
        render_started = time.perf_counter()
        chunks: list[Audio] = []
        for chunk in joined(engine.render(resolved), engine.engine.segment_gap):
            if not chunks:
                sink.begin(Outcome.BYPASS if self.refusal else Outcome.MISS, "engine",
                           reason=self.refusal or "")
            chunks.append(chunk)
            sink.chunk(chunk)
        self._rendered = Audio.join(chunks)
        entry = engine.seal(self.key, self._rendered, resolved,
                            render_seconds=round(seconds_since(render_started), 4))
        engine.count("misses")
        return Made(Result(entry, self.key, Outcome.MISS, "engine", seconds_since(self.started)),
                    entry, resolved.tenant)

    def admit(self, made: Made[Result]) -> Made[Result]:
        """The storing gate, between made and publish: a take refused by a text rule, for
        too few callers, because a sentence of it was refused, or by the quality gate
        (rendered once more first, under ``on_fail = "retry"``) is handed to its callers
        with ``stored=False`` and its reason, and published nowhere."""
        if made.entry is None:
            return made
        gate = self.engine.gate
        reason = self.refusal or made.value.reason or None
        if reason is None and self._rendered is not None:
            reason = gate.quality_refusal(self._rendered, self.resolved)
            if reason is not None and gate.retry:
                gate.refused(self.key, self.resolved, reason)
                made = self._render(NO_PROGRESS)  # the same render path, once more
                reason = gate.quality_refusal(self._rendered, self.resolved)
        if reason is None:
            return made
        gate.refused(self.key, self.resolved, reason)
        return Made(replace(made.value, cache=Outcome.BYPASS, stored=False, reason=reason,
                            seconds=seconds_since(self.started)), None, made.tenant)

    def published(self, made: Result, held: Entry | None) -> Result:
        self.engine.remember(self.resolved, self.key)
        if held is not None:
            self.engine.gate.stored(self.key, self.resolved)
        return made.published(held or made.entry, held is not None, seconds_since(self.started))

    def joined(self, value: Result, sink: Progress, replayed: int) -> Result:
        self.engine.count("joins")
        self.engine.gate.joined(self.key, self.resolved, self.caller)
        if not replayed:  # it existed before this caller joined: one chunk, whole
            sink.begin(joined_outcome(value), value.tier, reason=value.reason)
            sink.chunk(value.entry.audio())
        return replace(value, cache=joined_outcome(value), seconds=seconds_since(self.started))


def joined_outcome(result: Result) -> Outcome:
    """How a joiner was served: ``joined``, or ``bypass`` when the take is not stored (the
    gate's reason travels with it)."""
    return Outcome.BYPASS if result.reason else Outcome.JOINED


def audio_of(result: Result) -> Audio:
    """A result's take, decoded."""
    return result.entry.audio()
