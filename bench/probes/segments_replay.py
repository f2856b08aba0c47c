"""Replay a realistic announcement workload: whole-request caching vs segment caching.

``python -m bench.probes.segments_replay [--requests 4000] [--json] [--piper N]``

Workload: a few hundred distinct sentences (greetings, specials, platform and
opening-hour announcements, closings) combined into ~1,200 distinct requests of
1-4 sentences; 4,000 requests drawn with the skew operators report — 70% of the
requests go to 15% of the combinations. The same request sequence is replayed
against two fresh caches, ``CachedEngine(segments=False)`` and ``(segments=True)``.

Engine time: the tone engine stands in for Piper with a cost model calibrated
on real Piper (``en_US-joe-medium``, 2 onnxruntime threads, this machine):
0.062 s per sentence + 0.00996 s per character (fit over 16 renders of 10-99
characters; ``--calibrate`` measures it again). ``--piper N`` instead replays
the first N requests with real Piper and measured times.

Time to first audio (TTFA): a request whose first sentence is cached starts
playing at cache speed (the measured lookup); otherwise when the engine has
produced its first sentence (streaming) or all its missing sentences (whole
body). Hits are measured, not modelled.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engine import Engine
from voxcache.engines.tone import ToneEngine
from voxcache.request import ResolvedRequest, SynthesisRequest

PER_SENTENCE = 0.062
PER_CHAR = 0.00996

GREETINGS = ["Welcome!", "Good morning.", "Good afternoon.", "Good evening.", "Hello and welcome.",
             "Welcome to Riverside Market.", "Thank you for visiting.", "Attention please."]
DISHES = ["braised pork", "beef noodle soup", "steamed fish", "mapo tofu", "fried rice",
          "dumplings", "roast duck", "hot and sour soup", "spring rolls", "sweet and sour chicken",
          "kung pao chicken", "wonton soup", "egg tarts", "chow mein", "char siu buns"]
CITIES = ["the airport", "Central", "Harbour Front", "North Point", "Riverside", "Old Town",
          "University", "the Stadium", "West Gate", "Lakeside"]
CLOSINGS = ["Thank you.", "Have a nice day.", "Please scan the code to order.",
            "Mind the gap.", "Enjoy your meal.", "We hope to see you again soon.",
            "Please keep your belongings with you at all times."]


def sentence_pool(rng: random.Random) -> dict[str, list[str]]:
    """A few hundred distinct sentences, by role."""
    bodies = [f"Today's special is {d}." for d in DISHES]
    bodies += [f"The {d} is sold out." for d in DISHES]
    bodies += [f"The next train to {c} departs from platform {p}."
               for c in CITIES for p in range(1, 9)]
    bodies += [f"The train to {c} is delayed by {m} minutes." for c in CITIES
               for m in (5, 10, 15, 20, 30)]
    bodies += [f"Order number {n} is ready for pickup." for n in range(100, 200)]
    bodies += [f"The store will close in {m} minutes." for m in (5, 10, 15, 30, 45, 60)]
    rng.shuffle(bodies)
    return {"open": GREETINGS, "body": bodies, "close": CLOSINGS}


def combinations(pool: dict[str, list[str]], count: int, rng: random.Random) -> list[str]:
    """Distinct requests of 1-4 sentences: [greeting] body [body] [closing]."""
    seen: dict[str, None] = {}
    while len(seen) < count:
        parts = []
        if rng.random() < 0.7:
            parts.append(rng.choice(pool["open"]))
        parts += rng.sample(pool["body"], 2 if rng.random() < 0.35 else 1)
        if rng.random() < 0.6:
            parts.append(rng.choice(pool["close"]))
        seen[" ".join(parts)] = None
    return list(seen)


def workload(requests: int, combos: int, seed: int = 7) -> list[str]:
    """The request sequence: 70% of requests on 15% of the combinations."""
    rng = random.Random(seed)
    texts = combinations(sentence_pool(rng), combos, rng)
    hot = texts[: int(len(texts) * 0.15)]
    cold = texts[len(hot):]
    return [rng.choice(hot) if rng.random() < 0.7 else rng.choice(cold)
            for _ in range(requests)]


class Metered(Engine):
    """Wraps an engine: records each rendered sentence and its engine seconds.

    With ``model=True`` the seconds come from the Piper cost model (the inner
    engine is the instant tone engine); otherwise they are measured.
    """

    def __init__(self, inner: Engine, model: bool) -> None:
        self.inner = inner
        self.model = model
        self.log: list[tuple[str, float]] = []
        for name in ("id", "model_revision", "sample_rate", "params", "languages",
                     "default_language", "voices", "default_voice", "segments_context_free",
                     "segment_gap"):
            setattr(self, name, getattr(inner, name))

    def split_sentences(self, text: str) -> list[str] | None:
        return self.inner.split_sentences(text)

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        sentences = self.inner.split_sentences(request.text) or [request.text]
        chunks = iter(self.inner.render(request))
        for i in range(10**6):
            started = time.perf_counter()
            chunk = next(chunks, None)
            if chunk is None:
                return
            took = time.perf_counter() - started
            sentence = sentences[i] if i < len(sentences) else ""
            self.log.append((sentence, PER_SENTENCE + PER_CHAR * len(sentence)
                             if self.model else took))
            yield chunk


def replay(texts: list[str], engine: Metered, segments: bool, root: Path) -> dict[str, Any]:
    """Serve ``texts`` in order; return engine seconds, outcomes and TTFA figures."""
    cache = Cache(root)
    cached = CachedEngine(engine, cache, segments=segments)
    outcomes: dict[str, int] = {}
    ttfa_stream: list[float] = []
    ttfa_body: list[float] = []
    for text in texts:
        request = SynthesisRequest(text)
        first = (engine.split_sentences(text) or [text])[0]
        probe_key = cached.resolve_and_key(SynthesisRequest(first))[1]
        probe_started = time.perf_counter()
        first_cached = cache.get(probe_key) is not None if segments else False
        probe = time.perf_counter() - probe_started
        before = len(engine.log)
        result = cached.synthesize(request)
        rendered = engine.log[before:]
        outcomes[result.cache] = outcomes.get(result.cache, 0) + 1
        if not rendered:
            ttfa_stream.append(result.seconds)
            ttfa_body.append(result.seconds)
            continue
        cost = sum(seconds for _, seconds in rendered)
        ttfa_stream.append(probe if first_cached else rendered[0][1])
        ttfa_body.append(cost)
    cache.close()
    return {"engine_seconds": round(sum(s for _, s in engine.log), 2),
            "sentences_rendered": len(engine.log), "outcomes": outcomes,
            "ttfa_stream": _summary(ttfa_stream), "ttfa_body": _summary(ttfa_body)}


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"mean_ms": round(statistics.fmean(ordered) * 1000, 2),
            "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
            "p95_ms": round(ordered[int(len(ordered) * 0.95)] * 1000, 2)}


def calibrate() -> tuple[float, float]:
    """Fit seconds = a + b * characters on real Piper renders of single sentences."""
    import numpy as np

    from voxcache.engines.piper import PiperEngine
    from voxcache.request import resolve

    piper = PiperEngine(threads=2)
    samples = [s for s in sentence_pool(random.Random(1))["body"][:12]] + GREETINGS[:4]
    xs, ys = [], []
    for text in samples:
        resolved = resolve(SynthesisRequest(text), piper)
        started = time.perf_counter()
        list(piper.render(resolved))
        xs.append(len(text))
        ys.append(time.perf_counter() - started)
    slope, intercept = np.polyfit(xs, ys, 1)
    return float(intercept), float(slope)


def main() -> None:
    global PER_SENTENCE, PER_CHAR
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--combinations", type=int, default=1200)
    parser.add_argument("--piper", type=int, metavar="N", help="real Piper on N requests")
    parser.add_argument("--calibrate", action="store_true", help="re-fit the cost model")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.calibrate:
        PER_SENTENCE, PER_CHAR = calibrate()
    texts = workload(args.requests, args.combinations)
    distinct = set(texts)
    sentences = {s for t in distinct for s in ToneEngine().split_sentences(t) or []}
    report: dict[str, Any] = {
        "requests": len(texts), "distinct_requests": len(distinct),
        "distinct_sentences": len(sentences),
        "cost_model": {"per_sentence_s": round(PER_SENTENCE, 4),
                       "per_char_s": round(PER_CHAR, 5)}}
    with tempfile.TemporaryDirectory() as tmp:
        for mode, segments in (("whole_request", False), ("segments", True)):
            engine = Metered(ToneEngine(), model=True)
            report[mode] = replay(texts, engine, segments, Path(tmp) / mode)
        if args.piper:
            from voxcache.engines.piper import PiperEngine

            piper = PiperEngine(threads=2)
            sample = texts[: args.piper]
            report["piper_sample"] = {"requests": len(sample)}
            for mode, segments in (("whole_request", False), ("segments", True)):
                engine = Metered(piper, model=False)
                report["piper_sample"][mode] = replay(sample, engine, segments,
                                                      Path(tmp) / f"piper-{mode}")
    if args.json:
        print(json.dumps(report, indent=2))
        return
    _print(report)


def _print(report: dict[str, Any]) -> None:
    print(f"{report['requests']} requests, {report['distinct_requests']} distinct, "
          f"{report['distinct_sentences']} distinct sentences; cost model "
          f"{report['cost_model']}")
    blocks = [("modelled Piper", report)]
    if "piper_sample" in report:
        blocks.append((f"real Piper, first {report['piper_sample']['requests']} requests",
                       report["piper_sample"]))
    for title, block in blocks:
        print(f"\n{title}:")
        print(f"{'mode':<15}{'engine s':>10}{'sentences':>11}{'TTFA stream mean/p50/p95 ms':>32}"
              f"{'TTFA body mean ms':>19}  outcomes")
        for mode in ("whole_request", "segments"):
            r = block[mode]
            s = r["ttfa_stream"]
            print(f"{mode:<15}{r['engine_seconds']:>10}{r['sentences_rendered']:>11}"
                  f"{s['mean_ms']:>14}/{s['p50_ms']}/{s['p95_ms']:<10}"
                  f"{r['ttfa_body']['mean_ms']:>12}  {r['outcomes']}")


if __name__ == "__main__":
    main()
