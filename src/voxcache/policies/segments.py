"""Segment mode: serve a request from the sentences the cache has already heard.

When the engine declares its split (``Engine.split_sentences``) and that a sentence's audio
does not depend on its neighbours, a whole-request miss is the stored sentences plus the
missing ones rendered, joined by the engine's join rule. A context-free sentence is keyed
as the sentence asked alone (one stored copy, hit both ways); each passes the storing gate
on its own and has its own flight and lock (leaders render before they wait, locks in key
order: no cycles). docs/internals/segments.md.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from ..audio import Audio
from ..engine import Engine, JoinRule, joined
from ..errors import EngineError, InvalidParameter, UnsupportedFeature
from ..key import digest
from ..outcome import NO_PROGRESS, Progress, Result, seconds_since
from ..redact import redact
from ..resolved import ResolvedRequest
from ..singleflight import Flight
from .pipeline import Pipeline


@dataclass(frozen=True, slots=True)
class Segment:
    """One sentence of a request, resolved and keyed on its own."""

    index: int
    resolved: ResolvedRequest
    key: str


def check_engine(engine: Engine) -> None:
    """Refuse segment mode for an engine whose sentences need undeclared context."""
    if not engine.segments_context_free and (
            type(engine).segment_context is Engine.segment_context):
        raise UnsupportedFeature(
            f"segment mode is unavailable for engine {engine.id!r}: it declares that a "
            "sentence's audio depends on neighbouring text but does not declare that context "
            "(override Engine.segment_context), so a cached sentence could be reused where it "
            "would sound different; turn segment mode off for this engine")


def enabled(setting: str | bool, engine: Engine) -> bool | str:
    """Resolve the ``segments`` setting: ``auto`` turns it on only where it is safe, probing
    the engine's split in its own default language (``segment_probe``, which logs why);
    ``clauses`` goes below the sentence (``policies.clauses``), only for an engine that
    declares ``clause_safe`` — refused otherwise, never quietly split less."""
    value = str(setting).strip().lower()
    if value in ("auto", ""):
        from .segment_probe import auto

        return auto(engine)
    if value in ("on", "true", "1", "yes", "sentences"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    if value == "clauses":
        return CLAUSES
    raise InvalidParameter(f"segments setting {setting!r} must be auto, on (sentences), "
                           "clauses or off")


CLAUSES = "clauses"
"""The ``segments`` value of clause segments."""


def parse(setting: bool | str) -> bool | str:
    """A ``CachedEngine(segments=…)`` value: False, True (sentences) or ``"clauses"``."""
    if isinstance(setting, bool):
        return setting
    value = str(setting).strip().lower()
    if value in ("sentences", "on", "true"):
        return True
    if value in ("off", "false", ""):
        return False
    if value == CLAUSES:
        return CLAUSES
    raise InvalidParameter(f"segments={setting!r} must be True, False, 'sentences' or "
                           "'clauses'")


def plan(pipeline: Pipeline, resolved: ResolvedRequest) -> list[Segment] | None:
    """Key each sentence of ``resolved``; None when the request should stay whole."""
    engine = pipeline.engine
    try:
        texts = engine.split_sentences(resolved.text)
    except Exception as exc:  # the engine's own splitter (espeak for Piper) is engine code
        raise EngineError(f"engine {engine.id!r} could not split the text into sentences: "
                          f"{redact(str(exc))}") from exc
    if not texts or len(texts) < 2:
        return None
    segments = []
    for i, text in enumerate(texts):
        part = replace(resolved, text=text)
        if engine.segments_context_free:
            key = pipeline.key_of(part)
        else:
            payload = pipeline.key_payload(part, kind="segment")
            payload["context"] = engine.segment_context(texts, i)
            key = digest(payload)
        segments.append(Segment(i, part, key))
    return segments


class _InOrder(dict[str, Audio]):
    """Segment audio by key that hands each sentence to ``progress`` in request order, as
    soon as it and every sentence before it exist (a stored third sentence waits for a
    rendered second one; stored leading sentences go at once), under the join rule."""

    def __init__(self, segments: list[Segment], progress: Progress,
                 rule: Callable[[Audio], Audio]) -> None:
        super().__init__()
        self._segments = segments
        self._progress = progress
        self._rule = rule
        self._next = 0

    def __setitem__(self, key: str, value: Audio) -> None:
        super().__setitem__(key, value)
        self.flush()

    def flush(self) -> None:
        while self._next < len(self._segments) and self._segments[self._next].key in self:
            self._progress.chunk(self._rule(self[self._segments[self._next].key]))
            self._next += 1


def serve(pipeline: Pipeline, resolved: ResolvedRequest, key: str, started: float,
          segments: list[Segment] | None = None,
          progress: Progress = NO_PROGRESS, refusal: str | None = None,
          caller: str | None = None,
          rule: Callable[[], Callable[[Audio], Audio]] | None = None) -> Result | None:
    """Make a whole-request miss from segments (sealed, for the caller to publish); None
    when segment mode does not apply.

    ``progress`` hears how the request is served once the stored sentences are known,
    then every sentence in order as it becomes available — stored ones at once, rendered
    ones as the engine yields them. ``refusal``: why the request's take will not be stored,
    known already (said in ``begin``); ``caller`` counts towards each sentence's
    ``admit_after``. ``rule`` makes the join rule (default: the engine's sentence
    ``JoinRule``; clause segments bring their own, ``policies.joins``).
    """
    gap = pipeline.engine.segment_gap
    rule = rule or (lambda: JoinRule(gap))
    segments = segments if segments is not None else plan(pipeline, resolved)
    if segments is None:
        return None
    stored_audio: dict[str, Audio] = {}
    entries = {}
    for seg in segments:
        if seg.key not in stored_audio:
            found = pipeline.lookup(seg.key)
            if found is not None:
                stored_audio[seg.key] = found[0].audio()
                entries[seg.key] = found[0]
    hit_keys = set(stored_audio)
    stored = sum(1 for s in segments if s.key in hit_keys)
    how, tier = _how(stored, len(segments))
    progress.begin("bypass" if refusal else how, tier, (stored, len(segments) - stored),
                   refusal or "")
    audio = _InOrder(segments, progress, rule())
    audio.update(stored_audio)
    audio.flush()
    missing = list(dict.fromkeys(s.key for s in segments if s.key not in audio))
    refused: dict[str, str] = {}
    rendered = _fill(pipeline, resolved, segments, missing, audio, caller, refused)
    # Sentences another caller rendered meanwhile (a joined flight, another process's
    # lock) count as hits: this request did not render them.
    hits = sum(1 for s in segments if s.key not in rendered)
    pipeline.count("segment_hits", hits)
    pipeline.count("segment_renders", len(segments) - hits)
    for seg in segments:
        if seg.key in hit_keys:
            pipeline.served(seg.resolved, entries[seg.key])
        if pipeline.text_refusal(seg.resolved) is None:  # never-store text stays out of usage
            pipeline.asked(seg.resolved, seg.key, seg.key in hit_keys, kind="segment")
    joining = rule()
    stitched = Audio.join([joining(audio[s.key]) for s in segments])
    how, tier = _how(hits, len(segments))
    if how == "partial":
        pipeline.count("partials")
    elif how == "miss":
        pipeline.count("misses")
    reason = next((refused[s.key] for s in segments if s.key in refused), "")
    return Result(pipeline.seal(key, stitched, resolved), key, how, tier,
                  seconds_since(started), False, segments_hit=hits,
                  segments_rendered=len(segments) - hits, reason=reason)


def _how(hits: int, total: int) -> tuple[str, str]:
    """How a request of ``total`` sentences, ``hits`` of them not rendered here, is served."""
    if hits == total:
        return "hit", "segments"
    return ("partial" if hits else "miss"), "engine"


def stitch(parts: list[Audio], gap: float) -> Audio:
    """Join sentence takes under the engine's join rule (``engine.JoinRule``)."""
    return Audio.join(list(joined(parts, gap)))


def _fill(pipeline: Pipeline, resolved: ResolvedRequest, segments: list[Segment],
          missing: list[str], audio: dict[str, Audio], caller: str | None,
          refused: dict[str, str]) -> set[str]:
    """Get every missing segment's audio into ``audio``; return the keys this call rendered
    (``refused``: the segments not stored, and why)."""
    led: dict[str, Flight] = {}
    followed: dict[str, Flight] = {}
    for seg_key in missing:
        flight, leader = pipeline.flights.join_or_lead(seg_key)
        (led if leader else followed)[seg_key] = flight
    by_key = {s.key: s for s in segments}
    rendered: set[str] = set()
    if led:
        rendered = _lead(pipeline, resolved, segments, by_key, led, audio, caller, refused)
    for seg_key, flight in followed.items():
        try:
            shared: Result = flight.wait(pipeline.lock_wait)
            audio[seg_key] = shared.entry.audio()
            if shared.reason:  # another caller's take of it was refused: not stored
                refused[seg_key] = shared.reason
            pipeline.count("joins")
        except TimeoutError:  # a stuck leader: a duplicate render beats a stuck request
            rendered |= _render_into(pipeline, resolved, segments, [by_key[seg_key]],
                                     {seg_key: Flight()}, audio, caller, refused)
    return rendered


def _lead(pipeline: Pipeline, resolved: ResolvedRequest, segments: list[Segment],
          by_key: dict[str, Segment], led: dict[str, Flight],
          audio: dict[str, Audio], caller: str | None, refused: dict[str, str]) -> set[str]:
    """Render the segments this caller leads, holding their locks in key order."""
    try:
        with contextlib.ExitStack() as stack:
            todo: list[Segment] = []
            for seg_key in sorted(led):
                locked = stack.enter_context(pipeline.lock(seg_key))
                found = pipeline.lookup(seg_key) if locked else None
                if found is not None:  # another process rendered it while we waited
                    audio[seg_key] = found[0].audio()
                    led[seg_key].land(Result(found[0], seg_key, "joined", found[1], 0.0))
                else:
                    todo.append(by_key[seg_key])
            todo.sort(key=lambda s: s.index)
            return _render_into(pipeline, resolved, segments, todo, led, audio, caller,
                                refused)
    except BaseException as exc:
        for flight in led.values():
            flight.fail(exc)
        raise
    finally:
        for seg_key, flight in led.items():
            pipeline.flights.done(seg_key, flight)


def _render_into(pipeline: Pipeline, resolved: ResolvedRequest, segments: list[Segment],
                 todo: list[Segment], flights: dict[str, Flight],
                 audio: dict[str, Audio], caller: str | None,
                 refused: dict[str, str]) -> set[str]:
    """Render ``todo``; each segment passes the storing gate, its flight is settled as soon
    as its take exists, then the take is published (unless refused: then it is only
    handed out) and the published one (ours, or another node's that was first) is what
    the stitch uses. A sentence's engine seconds are the time the engine took to yield
    it."""
    if not todo:
        return set()
    wanted = {s.index for s in todo}
    last = time.perf_counter()
    for seg, chunk in _render(pipeline, resolved, segments, todo):
        now = time.perf_counter()
        spent, last = now - last, now
        if seg.index not in wanted or seg.key in audio:
            continue
        started = time.perf_counter()
        ours = pipeline.seal(seg.key, chunk, seg.resolved, render_seconds=round(spent, 4))
        flight = flights[seg.key]
        flight.chunk(chunk)
        reason = pipeline.refusal(seg.key, seg.resolved, caller, chunk)
        if reason is not None:  # served to whoever waits for it, stored nowhere
            flight.land(Result(ours, seg.key, "bypass", "engine", seconds_since(started),
                               False, reason=reason))
            refused[seg.key] = reason
            audio[seg.key] = chunk
            continue
        flight.settle(Result(ours, seg.key, "miss", "engine", seconds_since(started)))
        entry, stored = pipeline.store(ours, seg.resolved)
        if pipeline.engine.segments_context_free:  # its key is a request key: keep its lineage
            pipeline.remember(seg.resolved, seg.key)
        flight.land(Result(entry, seg.key, "miss", "engine", seconds_since(started), stored))
        audio[seg.key] = chunk if entry is ours else entry.audio()
    lost = [s.key for s in todo if s.key not in audio]
    if lost:
        raise EngineError(f"engine {pipeline.engine.id!r} returned no audio for "
                          f"{len(lost)} sentence(s)")
    return {s.key for s in todo}


def _render(pipeline: Pipeline, resolved: ResolvedRequest, segments: list[Segment],
            todo: list[Segment]) -> Iterator[tuple[Segment, Audio]]:
    """Yield (segment, audio) from as few engine calls as the engine's split allows."""
    engine = pipeline.engine
    if not engine.segments_context_free:
        # Neighbours shape each sentence: render the paragraph as asked, keep what is needed.
        yield from _call(pipeline, resolved, segments)
        return
    joined = " ".join(s.resolved.text for s in todo)
    if len(todo) == 1 or engine.split_sentences(joined) == [s.resolved.text for s in todo]:
        yield from _call(pipeline, replace(resolved, text=joined), todo)
        return
    for seg in todo:  # the joined text would split differently: one call per sentence
        yield from _call(pipeline, seg.resolved, [seg])


def _call(pipeline: Pipeline, request: ResolvedRequest,
          expected: list[Segment]) -> Iterator[tuple[Segment, Audio]]:
    """One engine call whose chunks are, in order, the sentences ``expected``."""
    count = 0
    for chunk in pipeline.render(request):
        if count >= len(expected):
            raise EngineError(f"engine {pipeline.engine.id!r} yielded more chunks than "
                              f"the {len(expected)} sentences it declared")
        yield expected[count], chunk
        count += 1
    if count != len(expected):
        raise EngineError(f"engine {pipeline.engine.id!r} yielded {count} chunks for "
                          f"{len(expected)} declared sentences")
