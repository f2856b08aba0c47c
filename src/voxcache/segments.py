"""Segment mode: serve a request from the sentences the cache has already heard.

Real traffic repeats sentences far more than whole requests. When the engine
declares how it splits text (``Engine.split_sentences``) and that a sentence's
audio does not depend on its neighbours, a whole-request miss is served as the
cached sentences plus the missing ones rendered — in one engine call where the
engine would split the joined text the same way — stitched with the engine's
own inter-sentence gap, and stored under the request key as well.

Why a context-free segment's key is the key of the sentence asked alone: the
engine renders that sentence from the sentence alone, so it *is* the same
audio; one key means one stored copy, and a one-sentence request and the same
sentence inside a paragraph hit each other. An engine that conditions on its
neighbours gets ``kind: "segment"`` keys that include the declared context.

Each segment key has its own single flight and cross-process lock, so two
paragraphs sharing a new sentence render it once. A caller renders every
segment it leads before it waits on segments others lead, so flights never
wait on each other in a cycle; locks are taken in key order for the same reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .audio import Audio
from .engine import render_chunks
from .entry import audio_entry
from .errors import EngineError, InvalidParameter, UnsupportedFeature
from .key import digest, key_payload
from .request import ResolvedRequest
from .singleflight import Flight, key_lock
from .upgrades import record

if TYPE_CHECKING:
    from .cached import CachedEngine, Result
    from .engine import Engine


@dataclass(frozen=True, slots=True)
class Segment:
    """One sentence of a request, resolved and keyed on its own."""

    index: int
    resolved: ResolvedRequest
    key: str


def check_engine(engine: Engine) -> None:
    """Refuse segment mode for an engine whose sentences need undeclared context."""
    from .engine import Engine as Base

    if not engine.segments_context_free and (
            type(engine).segment_context is Base.segment_context):
        raise UnsupportedFeature(
            f"segment mode is unavailable for engine {engine.id!r}: it declares that a "
            "sentence's audio depends on neighbouring text but does not declare that context "
            "(override Engine.segment_context), so a cached sentence could be reused where it "
            "would sound different; turn segment mode off for this engine")


def enabled(setting: str | bool, engine: Engine) -> bool:
    """Resolve the ``segments`` setting: ``auto`` turns it on only where it is safe."""
    value = str(setting).strip().lower()
    if value in ("auto", ""):
        probe = engine.split_sentences("One. Two.")
        return probe is not None and (engine.segments_context_free or (
            type(engine).segment_context is not _base_segment_context()))
    if value in ("on", "true", "1", "yes"):
        return True
    if value in ("off", "false", "0", "no"):
        return False
    raise InvalidParameter(f"segments setting {setting!r} must be auto, on or off")


def _base_segment_context() -> object:
    from .engine import Engine as Base

    return Base.segment_context


def plan(cached: CachedEngine, resolved: ResolvedRequest) -> list[Segment] | None:
    """Key each sentence of ``resolved``; None when the request should stay whole."""
    engine = cached.engine
    texts = engine.split_sentences(resolved.text)
    if not texts or len(texts) < 2:
        return None
    segments = []
    for i, text in enumerate(texts):
        part = replace(resolved, text=text)
        if engine.segments_context_free:
            key = cached.key_of(part)
        else:
            payload = key_payload(part, cached._waveform, kind="segment")
            payload["context"] = engine.segment_context(texts, i)
            key = digest(payload)
        segments.append(Segment(i, part, key))
    return segments


class _Sink(dict[str, Audio]):
    """Segment audio by key that reports each arrival (what streaming plays from)."""

    def __init__(self, notify: Callable[[str, Audio], None]) -> None:
        super().__init__()
        self._notify = notify

    def __setitem__(self, key: str, value: Audio) -> None:
        super().__setitem__(key, value)
        self._notify(key, value)


def serve(cached: CachedEngine, resolved: ResolvedRequest, key: str, started: float,
          segments: list[Segment] | None = None,
          notify: Callable[[str, Audio], None] | None = None) -> Result | None:
    """Serve a whole-request miss from segments; None when segment mode does not apply.

    ``notify(segment_key, audio)`` is called as each sentence becomes available —
    cached ones at once, rendered ones as the engine yields them.
    """
    from .cached import Result, _meta

    segments = segments if segments is not None else plan(cached, resolved)
    if segments is None:
        return None
    audio: dict[str, Audio] = _Sink(notify) if notify else {}
    for seg in segments:
        if seg.key not in audio:
            found = cached.cache.get(seg.key)
            if found is not None:
                audio[seg.key] = found[0].audio()
    hit_keys = set(audio)
    missing = list(dict.fromkeys(s.key for s in segments if s.key not in audio))
    rendered = _fill(cached, resolved, segments, missing, audio)
    hits = sum(1 for s in segments if s.key not in rendered)
    cached.cache.count("segment_hits", hits)
    cached.cache.count("segment_renders", len(segments) - hits)
    cached.usage.segments(segments, hit_keys)
    stitched = stitch([audio[s.key] for s in segments], cached.engine.segment_gap)
    ttl = resolved.ttl if resolved.ttl is not None else cached.cache.config.default_ttl
    entry = audio_entry(key, stitched, ttl=ttl, meta=_meta(resolved))
    stored = cached.cache.put(entry, tenant=resolved.tenant)
    if hits == len(segments):
        how, tier = "hit", "segments"
    elif hits:
        how, tier = "partial", "engine"
        cached.cache.count("partials")
    else:
        how, tier = "miss", "engine"
        cached.cache.count("misses")
    return Result(entry, key, how, tier, time.perf_counter() - started, stored,
                  segments_hit=hits, segments_rendered=len(segments) - hits)


def stitch(parts: list[Audio], gap: float) -> Audio:
    """Join sentence takes with the engine's own silence between them."""
    if gap <= 0 or len(parts) < 2:
        return Audio.join(parts)
    first = parts[0]
    silence = Audio(b"\0\0" * first.channels * round(gap * first.sample_rate),
                    first.sample_rate, first.channels)
    joined: list[Audio] = []
    for i, part in enumerate(parts):
        if i:
            joined.append(silence)
        joined.append(part)
    return Audio.join(joined)


def _fill(cached: CachedEngine, resolved: ResolvedRequest, segments: list[Segment],
          missing: list[str], audio: dict[str, Audio]) -> set[str]:
    """Get every missing segment's audio into ``audio``; return the keys this call rendered."""
    led: dict[str, Flight] = {}
    followed: dict[str, Flight] = {}
    for seg_key in missing:
        flight, leader = cached.flights.join_or_lead(seg_key)
        (led if leader else followed)[seg_key] = flight
    by_key = {s.key: s for s in segments}
    rendered: set[str] = set()
    if led:
        rendered = _lead(cached, resolved, segments, by_key, led, audio)
    for seg_key, flight in followed.items():
        try:
            shared: Result = flight.future.result(timeout=cached.lock_wait)
            audio[seg_key] = shared.entry.audio()
            cached.cache.count("joins")
        except TimeoutError:  # a stuck leader: a duplicate render beats a stuck request
            rendered |= _render_into(cached, resolved, segments, [by_key[seg_key]],
                                     {seg_key: Flight()}, audio)
    return rendered


def _lead(cached: CachedEngine, resolved: ResolvedRequest, segments: list[Segment],
          by_key: dict[str, Segment], led: dict[str, Flight], audio: dict[str, Audio]) -> set[str]:
    """Render the segments this caller leads, holding their locks in key order."""
    from .cached import Result

    try:
        with contextlib.ExitStack() as stack:
            todo: list[Segment] = []
            for seg_key in sorted(led):
                locked = stack.enter_context(
                    key_lock(cached.cache.root / "locks", seg_key, cached.lock_wait,
                             on_fault=cached.cache.lock_fault))
                entry = cached.cache.read_disk(seg_key) if locked else None
                if entry is not None:  # another process rendered it while we waited
                    audio[seg_key] = entry.audio()
                    led[seg_key].future.set_result(
                        Result(entry, seg_key, "joined", "disk", 0.0))
                else:
                    todo.append(by_key[seg_key])
            todo.sort(key=lambda s: s.index)
            return _render_into(cached, resolved, segments, todo, led, audio)
    except BaseException as exc:
        for flight in led.values():
            if not flight.future.done():
                flight.future.set_exception(exc)
        raise
    finally:
        for seg_key, flight in led.items():
            cached.flights.land(seg_key, flight)


def _render_into(cached: CachedEngine, resolved: ResolvedRequest, segments: list[Segment],
                 todo: list[Segment], flights: dict[str, Flight],
                 audio: dict[str, Audio]) -> set[str]:
    """Render ``todo``, store each segment and complete its flight as soon as it exists."""
    from .cached import Result, _meta

    if not todo:
        return set()
    ttl = resolved.ttl if resolved.ttl is not None else cached.cache.config.default_ttl
    wanted = {s.index for s in todo}
    for seg, chunk in _render(cached, resolved, segments, todo):
        if seg.index not in wanted or seg.key in audio:
            continue
        started = time.perf_counter()
        entry = audio_entry(seg.key, chunk, ttl=ttl, meta=_meta(seg.resolved))
        stored = cached.cache.put(entry, tenant=resolved.tenant)
        if cached.engine.segments_context_free:  # its key is a request key: keep its lineage
            record(cached, seg.resolved, seg.key)
        audio[seg.key] = chunk
        flight = flights[seg.key]
        flight.publish(chunk)
        flight.future.set_result(Result(entry, seg.key, "miss", "engine",
                                        time.perf_counter() - started, stored))
    lost = [s.key for s in todo if s.key not in audio]
    if lost:
        raise EngineError(f"engine {cached.engine.id!r} returned no audio for "
                          f"{len(lost)} sentence(s)")
    return {s.key for s in todo}


def _render(cached: CachedEngine, resolved: ResolvedRequest, segments: list[Segment],
            todo: list[Segment]) -> Iterator[tuple[Segment, Audio]]:
    """Yield (segment, audio) from as few engine calls as the engine's split allows."""
    engine = cached.engine
    if not engine.segments_context_free:
        # Neighbours shape each sentence: render the paragraph as asked, keep what is needed.
        yield from _call(cached, resolved, segments)
        return
    joined = " ".join(s.resolved.text for s in todo)
    if len(todo) == 1 or engine.split_sentences(joined) == [s.resolved.text for s in todo]:
        yield from _call(cached, replace(resolved, text=joined), todo)
        return
    for seg in todo:  # the joined text would split differently: one call per sentence
        yield from _call(cached, seg.resolved, [seg])


def _call(cached: CachedEngine, request: ResolvedRequest,
          expected: list[Segment]) -> Iterator[tuple[Segment, Audio]]:
    """One engine call whose chunks are, in order, the sentences ``expected``."""
    started = time.perf_counter()
    count = 0
    for chunk in render_chunks(cached.engine, request):
        if count >= len(expected):
            raise EngineError(f"engine {cached.engine.id!r} yielded more chunks than "
                              f"the {len(expected)} sentences it declared")
        yield expected[count], chunk
        count += 1
    cached.cache.count("syntheses")
    cached.cache.count("render_ms", int((time.perf_counter() - started) * 1000))
    if count != len(expected):
        raise EngineError(f"engine {cached.engine.id!r} yielded {count} chunks for "
                          f"{len(expected)} declared sentences")
