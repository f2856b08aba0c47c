"""Clause joins measured against live Piper (docs/internals/segments.md).

    python -m bench.probes.clause_joins [--sentences 30] [--first-audio 10] [--json]

For each sentence: Piper's own whole render ("live") against the take
``CachedEngine(segments="clauses")`` stitches from clauses rendered alone (fresh cache,
Piper's default noise, so both are ordinary takes). A second live take of each sentence
gives the floor (one live take against another: Piper's noise alone). Pause: the k
longest inner silences of each take (k joins), in order, compared pairwise (median and
p95 of |stitched − live|, ms). Loudness: integrated loudness (ITU-R BS.1770-4,
pyloudnorm) of both, |difference| in LU. Word error: Whisper base (the quality gate's
transcriber and scorer, numbers left out) on both. First audio: a new sentence opening
with a stored clause, streamed (time to its first chunk), against Piper's first chunk of
the same sentence rendered live.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from voxcache.audio import Audio
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.policies.joins import LEVEL, interior_pauses, pause_profile
from voxcache.request import SynthesisRequest

SENTENCES = [
    "Thanks for waiting, your order has shipped.",
    "Thanks for waiting, your refund was issued, and it should arrive soon.",
    "I understand, let me check that for you.",
    "Sorry about the delay, your package is on its way.",
    "Good morning, thank you for calling the help desk.",
    "Your balance is up to date, and no payment is due.",
    "If you have your account number ready, I can look it up now.",
    "I have updated your address; the change takes effect today.",
    "Before we continue, may I have your full name?",
    "One moment please, I am transferring you to billing.",
    "Your card was declined, so the order is on hold.",
    "Of course, I can help with that.",
    "The store opens at nine, and it closes at six.",
    "We received your request: a technician will call you.",
    "Your appointment is confirmed, see you on Monday.",
    "Unfortunately, that item is out of stock.",
    "To reset your password, open the link in the email.",
    "Thanks for your patience, the system is back online.",
    "Your subscription renews next month, unless you cancel it.",
    "As requested, I have closed the ticket.",
    "Great, everything is set up on our side.",
    "I see the problem, the charge was posted twice.",
    "For your security, please do not share the code.",
    "Your delivery is scheduled for tomorrow, between noon and four.",
    "Is there anything else, or can I close this chat?",
    "Your claim was approved; the payment will follow.",
    "Welcome back, how can I help you today?",
    "The update is free, and it takes about ten minutes.",
    "Please stay on the line, an agent will be with you shortly.",
    "Thank you for calling, have a wonderful day.",
]
NEW_TAILS = ["the courier will bring it by noon.", "we will email you a receipt.",
             "nothing else is needed from you.", "the form is on our website.",
             "I will send a confirmation.", "your case number is in the email.",
             "a manager will follow up.", "it usually takes two days.",
             "the fee has been waived.", "you can track it in the app."]


def loudness(audio: Audio) -> float:
    """Integrated loudness (LUFS) of ``audio``."""
    import pyloudnorm

    x = audio.samples().astype(np.float64) / 32768.0
    meter = pyloudnorm.Meter(audio.sample_rate)
    if x.size < audio.sample_rate * 0.5:  # the meter's 400 ms blocks need some length
        x = np.concatenate([x, np.zeros(int(audio.sample_rate * 0.5) - x.size)])
    return float(meter.integrated_loudness(x))


def join_pauses(audio: Audio, joins: int) -> list[float]:
    """The ``joins`` longest inner silences, in time order (seconds)."""
    runs = interior_pauses(audio)
    longest = sorted(range(len(runs)), key=lambda i: runs[i], reverse=True)[:joins]
    found = [runs[i] for i in sorted(longest)]
    return found + [0.0] * (joins - len(found))


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=len(SENTENCES))
    parser.add_argument("--first-audio", type=int, default=len(NEW_TAILS))
    parser.add_argument("--no-asr", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from voxcache.engines.piper import PiperEngine
    from voxcache.policies.clauses import split_clauses

    piper = PiperEngine(threads=2)
    folder = Path(tempfile.mkdtemp(prefix="vx-clause-joins-"))
    cached = CachedEngine(piper, Cache(folder / "cache"), segments="clauses")
    started = time.perf_counter()
    profile = pause_profile(cached, cached.resolve(SynthesisRequest("x")))
    learn_seconds = time.perf_counter() - started
    rows: list[dict[str, Any]] = []
    kept_whole: list[str] = []
    for text in SENTENCES[: args.sentences]:
        joins = len(split_clauses(text)) - 1
        live = Audio.join(list(piper.render(cached.resolve(SynthesisRequest(text)))))
        stitched = cached.synthesize(SynthesisRequest(text))
        if stitched.segments_hit + stitched.segments_rendered != joins + 1:
            kept_whole.append(text)  # the engine would split a clause again: no clause join
            continue
        again = Audio.join(list(piper.render(cached.resolve(SynthesisRequest(text)))))
        rows.append({"text": text, "joins": joins, "live": live, "stitched": stitched.audio,
                     "again": again})
    pause_diffs, lu_diffs, pauses_live, pauses_stitched = [], [], [], []
    floor_pauses, floor_lu = [], []  # one live take against another: the noise floor
    for row in rows:
        a, b = join_pauses(row["live"], row["joins"]), join_pauses(row["stitched"], row["joins"])
        c = join_pauses(row["again"], row["joins"])
        pauses_live += a
        pauses_stitched += b
        pause_diffs += [abs(x - y) * 1000 for x, y in zip(a, b, strict=True)]
        floor_pauses += [abs(x - y) * 1000 for x, y in zip(a, c, strict=True)]
        lu_diffs.append(abs(loudness(row["live"]) - loudness(row["stitched"])))
        floor_lu.append(abs(loudness(row["live"]) - loudness(row["again"])))
    report: dict[str, Any] = {
        "sentences": len(rows), "kept_whole": kept_whole, "joins": sum(r["joins"] for r in rows),
        "learned_pauses_ms": {m: round(s * 1000) for m, s in profile.items() if m != LEVEL},
        "learned_level_offset_db": round(profile[LEVEL], 2),
        "learning_seconds": round(learn_seconds, 1),
        "pause_live_median_ms": round(statistics.median(pauses_live) * 1000),
        "pause_stitched_median_ms": round(statistics.median(pauses_stitched) * 1000),
        "pause_diff_median_ms": round(statistics.median(pause_diffs)),
        "pause_diff_p95_ms": round(pct(pause_diffs, 95)),
        "lu_diff_median": round(statistics.median(lu_diffs), 2),
        "lu_diff_p95": round(pct(lu_diffs, 95), 2), "lu_diff_max": round(max(lu_diffs), 2),
        "live_vs_live_pause_diff_median_ms": round(statistics.median(floor_pauses)),
        "live_vs_live_pause_diff_p95_ms": round(pct(floor_pauses, 95)),
        "live_vs_live_lu_median": round(statistics.median(floor_lu), 2),
        "live_vs_live_lu_max": round(max(floor_lu), 2)}
    if not args.no_asr:
        report.update(word_errors(rows, folder))
    report.update(first_audio(cached, piper, rows[: args.first_audio]))
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for name, value in report.items():
        print(f"{name:>28}: {value}")


def word_errors(rows: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """Whisper base on both takes: word errors over all words (numbers left out)."""
    from voxcache.policies.admit.asr import Transcriber, _units, error_rate, weights_folder

    whisper = Transcriber(weights_folder(folder))
    words = errors_live = errors_stitched = 0.0
    for row in rows:
        n = len(_units(row["text"]))
        words += n
        errors_live += n * error_rate(row["text"], whisper.transcribe(row["live"], "en"))
        errors_stitched += n * error_rate(row["text"],
                                          whisper.transcribe(row["stitched"], "en"))
    return {"words": int(words), "wer_live_pct": round(100 * errors_live / words, 2),
            "wer_stitched_pct": round(100 * errors_stitched / words, 2)}


def first_audio(cached: CachedEngine, piper: Any, rows: list[dict[str, Any]]
                ) -> dict[str, Any]:
    """A new sentence opening with a stored clause: its first streamed chunk, against the
    first chunk of a live render of the same sentence."""
    from voxcache.policies.clauses import split_clauses

    ours, live = [], []
    for row, tail in zip(rows, NEW_TAILS, strict=False):
        text = f"{split_clauses(row['text'])[0]} {tail}"
        started = time.perf_counter()
        chunks = cached.stream(SynthesisRequest(text))
        next(chunks)
        ours.append((time.perf_counter() - started) * 1000)
        list(chunks)
        started = time.perf_counter()
        next(iter(piper.render(cached.resolve(SynthesisRequest(text)))))
        live.append((time.perf_counter() - started) * 1000)
    return {"first_audio_samples": len(ours),
            "first_audio_clause_hit_median_ms": round(statistics.median(ours), 1),
            "first_audio_clause_hit_p95_ms": round(pct(ours, 95), 1),
            "first_audio_live_median_ms": round(statistics.median(live)),
            "first_audio_live_p95_ms": round(pct(live, 95))}


if __name__ == "__main__":
    main()
