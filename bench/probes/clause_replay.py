"""Replay: characters and engine seconds from cache, sentence vs clause reuse (± admission).

    python -m bench.probes.clause_replay [--requests 3000] [--json]

The Harper Valley Bank transcripts (github.com/cricketclub/gridspace-stanford-harper-valley)
and ABCD, on which Memcat reports, cannot be downloaded here (no network but the package
registries), so two workloads that can:

- ``support``: agent lines in the shape of support calls — an opener clause, a body clause
  (often holding an order number, an amount, a day), a closing clause — plus the English
  lines of examples/hot_phrases.json; 1-2 sentences per request, openers and
  closings drawn with a Zipf skew, slots uniform;
- ``announcements``: bench/probes/segments_replay.py's workload (few clause marks: the control).

Each is replayed against fresh caches: ``segments=True`` (sentences), ``"clauses"``, and
``"clauses"`` with the admission rules (``never_store = digits, numbers, money``;
``admit_after = 2`` over 200 callers). Engine seconds: Piper's cost model from
bench/probes/segments_replay.py (per call + per character) over what the engine was asked to
render, the pause profile's probe renders included.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from bench.helpers.fixtures import HOT_PHRASES
from bench.probes.segments_replay import PER_CHAR, PER_SENTENCE, Metered, workload
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.policies.admit import AdmissionSettings, GateSettings
from voxcache.request import SynthesisRequest

HOT = HOT_PHRASES
OPENERS = ["Thanks for waiting,", "Sorry about that,", "I understand,", "Of course,", "Great,",
           "Okay,", "Thank you,", "One moment please,", "Let me check,", "Unfortunately,",
           "Good news,", "As requested,", "I see,", "Alright,"]
BODIES = ["your order {n} has shipped", "your refund of {amount} dollars was issued",
          "your appointment is on {day}", "your balance is {amount} dollars",
          "I have updated your address", "your card ending in {d4} was declined",
          "the technician will visit on {day}", "your ticket {n} is now closed",
          "your password was reset", "your package is at the local depot",
          "the charge was posted twice", "your subscription renews on {day}",
          "your claim was approved", "that item is out of stock",
          "your payment was received", "your account is verified",
          "the transfer will arrive on {day}", "I have cancelled the order"]
CLOSINGS = ["and it should arrive soon.", "is there anything else?", "have a nice day.",
            "you will get an email shortly.", "thanks for your patience.",
            "and no further action is needed.", "can I help with anything else?"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def zipf(rng: random.Random, items: list[str], s: float = 1.1) -> str:
    weights = [1 / (i + 1) ** s for i in range(len(items))]
    return rng.choices(items, weights)[0]


def support(requests: int, seed: int = 11) -> list[str]:
    """Agent lines: [opener] body[, closing | .], one or two sentences; some hot phrases."""
    rng = random.Random(seed)
    hot = [p["text"] for p in json.loads(HOT.read_text(encoding="utf-8"))["phrases"]
           if p.get("language", "en") == "en"]
    out = []
    for _ in range(requests):
        if rng.random() < 0.15:
            out.append(rng.choice(hot))
            continue
        sentences = []
        for _ in range(1 if rng.random() < 0.7 else 2):
            body = rng.choice(BODIES).format(n=rng.randint(10000, 99999), day=rng.choice(DAYS),
                                             amount=rng.choice(range(10, 500, 5)),
                                             d4=rng.randint(1000, 9999))
            line = f"{zipf(rng, OPENERS)} {body}" if rng.random() < 0.8 else body.capitalize()
            line += f", {zipf(rng, CLOSINGS)}" if rng.random() < 0.7 else "."
            sentences.append(line)
        out.append(" ".join(sentences))
    return out


def replay(texts: list[str], mode: str, root: Path) -> dict[str, Any]:
    engine = Metered(ToneEngine(), model=True)
    engine.clause_safe = True
    engine.speech = False  # tones stand in for speech: the gate's speech checks do not apply
    admission = mode.endswith("admission")
    gate = GateSettings(admission=AdmissionSettings(
        never_store=("digits", "numbers", "money"), admit_after=2)) if admission else None
    cache = Cache(root)
    cached = CachedEngine(engine, cache, segments="clauses" if "clauses" in mode else True,
                          gate=gate)
    rng = random.Random(3)
    chars = from_cache = 0
    baseline = 0.0
    for text in texts:
        before = len(engine.log)
        cached.synthesize(SynthesisRequest(text, caller=f"caller-{rng.randrange(200)}"))
        rendered = [s for s, _ in engine.log[before:]]
        size = len(text.replace(" ", ""))
        chars += size
        from_cache += max(0, size - sum(len(s.replace(" ", "")) for s in rendered))
        baseline += sum(PER_SENTENCE + PER_CHAR * len(s)
                        for s in ToneEngine().split_sentences(text) or [text])
    spent = sum(seconds for _, seconds in engine.log)
    cache.folder.flush()
    stored = cache.stats()["tiers"]["disk"]
    cache.close()
    return {"chars_from_cache_pct": round(100 * from_cache / chars, 1),
            "engine_s": round(spent, 1), "engine_s_no_cache": round(baseline, 1),
            "engine_s_saved_pct": round(100 * (1 - spent / baseline), 1),
            "engine_calls": len(engine.log), "stored_entries": stored["entries"],
            "stored_mb": round(stored["bytes"] / 1e6, 1)}


MODES = ("sentences", "clauses", "clauses+admission")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    loads = {"support": support(args.requests),
             "announcements": workload(args.requests, int(args.requests * 0.3))}
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, texts in loads.items():
            report[name] = {"requests": len(texts), "distinct": len(set(texts))}
            for mode in MODES:
                report[name][mode] = replay(texts, mode, Path(tmp) / f"{name}-{mode}")
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for name, block in report.items():
        print(f"\n{name}: {block['requests']} requests, {block['distinct']} distinct")
        print(f"{'mode':<20}{'chars from cache':>17}{'engine s':>10}{'no cache':>10}"
              f"{'saved':>8}{'calls':>7}{'stored':>8}{'MB':>6}")
        for mode in MODES:
            r = block[mode]
            print(f"{mode:<20}{r['chars_from_cache_pct']:>16}%{r['engine_s']:>10}"
                  f"{r['engine_s_no_cache']:>10}{r['engine_s_saved_pct']:>7}%"
                  f"{r['engine_calls']:>7}{r['stored_entries']:>8}{r['stored_mb']:>6}")


if __name__ == "__main__":
    main()
