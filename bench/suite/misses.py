"""Benchmark 3: a miss through voxcache against calling Piper directly.

On a miss voxcache does everything a hit does, then leads a flight, takes the key's
cross-process lock, checks the disk again, checksums and publishes the file, indexes it and
fills the memory tier. The paired rows (Piper alone, then the same kind of sentence through
voxcache) show the totals a user sees; since Piper's own run-to-run noise is larger than the
cache's work, the overhead is also measured in isolation by replaying Piper's audio through
an engine that returns instantly — that row is the cache's cost and nothing else.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Iterator
from typing import Any

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engine import Engine
from voxcache.request import ResolvedRequest, SynthesisRequest

from ..helpers import plots, trials
from ..helpers.core import Context, Stats, ratio, sample

NAME = "misses"
TITLE = "3. Misses: voxcache overhead over Piper"

DETERMINISTIC = {"noise_scale": 0.0, "noise_w_scale": 0.0}
WORDS = ("please", "stand", "clear", "of", "the", "closing", "doors", "the", "next", "train",
         "to", "the", "airport", "departs", "from", "platform", "four", "in", "six", "minutes",
         "mind", "the", "gap", "and", "keep", "your", "bags", "with", "you", "at", "all",
         "times", "thank", "you", "for", "travelling", "with", "us", "today", "our", "staff")
VARIANTS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
            "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo")


def sentence(words: int, variant: int) -> str:
    """A ``words``-word sentence; ``variant`` changes one word so every key is new."""
    body = [WORDS[i % len(WORDS)] for i in range(words - 1)]
    tag = f"{VARIANTS[variant % len(VARIANTS)]}{variant // len(VARIANTS) or ''}"
    return (" ".join([tag, *body]) + ".").capitalize()


class ReplayEngine(Engine):
    """Piper's identity with instant output: what remains of a miss is the cache's own work."""

    def __init__(self, piper: Any, chunks: list[Audio]) -> None:
        for name in ("id", "model_revision", "sample_rate", "params", "languages",
                     "default_language", "voices", "default_voice"):
            setattr(self, name, getattr(piper, name))
        self.chunks = chunks

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Yield the pre-rendered chunks."""
        yield from self.chunks


def piper_direct(piper: Any, text: str) -> list[Audio]:
    """Call the Piper library itself, as a user without voxcache would."""
    from piper.config import SynthesisConfig

    config = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    return [Audio(c.audio_int16_bytes, c.sample_rate, c.sample_channels)
            for c in piper.voice.synthesize(text, config)]


def measure(ctx: Context, piper: Any, words: int, counter: Iterator[int]) -> dict[str, Any]:
    """Paired Piper/voxcache misses plus the isolated overhead for one sentence length."""
    pairs = ctx.pick(1, 5)
    direct: list[float] = []
    through: list[float] = []
    with contextlib.ExitStack() as stack:
        cache = Cache(ctx.scratch(f"piper-{words}"))
        stack.callback(cache.close)
        cached = CachedEngine(piper, cache)
        chunks = piper_direct(piper, sentence(words, next(counter)))  # warm-up and replay take
        for i in range(pairs):
            order = [("direct", sentence(words, next(counter))),
                     ("cached", sentence(words, next(counter)))]
            for kind, text in order if i % 2 == 0 else reversed(order):
                if kind == "direct":
                    direct.append(_timed(lambda t=text: piper_direct(piper, t)))
                else:
                    through.append(_timed_result(cached, text))
        replay_cache = Cache(ctx.scratch(f"replay-{words}"))
        stack.callback(replay_cache.close)
        replay = CachedEngine(ReplayEngine(piper, chunks), replay_cache)
        overhead = sample(lambda: replay.synthesize(SynthesisRequest(
            sentence(words, next(counter)), params=DETERMINISTIC)), ctx.pick(30, 300), warmup=5)
        if words == HEADLINE_WORDS:
            summary = trials.interleave(
                trials.batch_median(lambda: replay.synthesize(SynthesisRequest(
                    sentence(words, next(counter)), params=DETERMINISTIC)), ctx.pick(10, 60)),
                lambda: _timed(lambda: piper_direct(piper, sentence(words, next(counter)))),
                ctx.repeat)
            ctx.trials(f"miss overhead ÷ Piper synthesis ({words} words)", summary,
                       f"{summary.subject * 1e3:.2f} ms of cache work vs Piper "
                       f"{summary.baseline * 1e3:.0f} ms (medians of rounds)")
    d, t = Stats.of(direct), Stats.of(through)
    chars = len(sentence(words, 0))
    audio_bytes = sum(len(c.pcm) for c in chunks)
    return {"words": words, "chars": chars, "audio KB": audio_bytes / 1000,
            "Piper direct median_ms": d.median * 1e3, "Piper direct p99_ms": d.p99 * 1e3,
            "via voxcache median_ms": t.median * 1e3, "via voxcache p99_ms": t.p99 * 1e3,
            "cache overhead median_ms": overhead.median * 1e3,
            "cache overhead p99_ms": overhead.p99 * 1e3, "overhead n": overhead.n,
            "overhead % of synthesis": 100 * ratio(overhead.median, d.median),
            "pairs": pairs}


HEADLINE_WORDS = 20


def _timed(fn: Any) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _timed_result(cached: CachedEngine, text: str) -> float:
    result = cached.synthesize(SynthesisRequest(text, params=DETERMINISTIC))
    assert result.cache == "miss", result.cache
    return result.seconds


def run(ctx: Context) -> None:
    """Measure 5-, 20- and 60-word sentences; hand Piper's seconds per character on."""
    try:
        from voxcache.engines.piper import PiperEngine

        piper = PiperEngine(threads=2)
    except Exception as exc:  # MissingDependency, or a broken onnxruntime
        ctx.note(f"Piper is not available ({exc}); misses skipped")
        return
    counter = iter(range(10**6))
    rows = [measure(ctx, piper, words, counter) for words in (5, 20, 60)]
    ctx.table("misses", "Miss latency: Piper alone vs through voxcache (ms)", rows, notes=[
        "`cache overhead` is a miss through voxcache with an engine that replays Piper's audio "
        "instantly: everything voxcache does on a miss (key, lookup, flight, cross-process "
        "lock, disk re-check, checksum, atomic publish, index insert, memory fill, and the "
        "model-upgrade alias record) and nothing of Piper's.",
        "Paired rows alternate which path goes first; Piper's own noise dwarfs the overhead."])
    chars = [r["chars"] for r in rows]
    seconds = [r["Piper direct median_ms"] / 1e3 for r in rows]
    slope, intercept = statistics.linear_regression(chars, seconds)
    slope, intercept = max(slope, 1e-4), max(intercept, 0.0)  # noise can tip the fit below 0
    ctx.shared["piper_seconds_per_char"] = (slope, intercept)
    ctx.note(f"Piper model fitted here: {intercept * 1e3:.0f} ms + {slope * 1e3:.2f} ms per "
             "character (used by the hit-ratio benchmark for engine seconds saved)")
    mid = rows[1]
    ctx.headline["miss overhead (20 words)"] = {
        "value": mid["cache overhead median_ms"],
        "detail": f"ms; {mid['overhead % of synthesis']:.2f}% of Piper's "
                  f"{mid['Piper direct median_ms']:.0f} ms (p99 overhead "
                  f"{mid['cache overhead p99_ms']:.1f} ms)"}
    ctx.plot("latency", plots.grouped_bars(
        [f"{r['words']} words" for r in rows],
        {"Piper direct": [r["Piper direct median_ms"] for r in rows],
         "through voxcache (miss)": [r["via voxcache median_ms"] for r in rows],
         "cache overhead alone": [r["cache overhead median_ms"] for r in rows]},
        "median ms (log)", "Miss latency: Piper vs voxcache"))
