"""The storing gate's figures on real speech (docs/operating/admission.md, "Measured").

    python -m bench.probes.admission [--asr]

- false refusals: Piper over every English hot phrase (speeds 0.75, 1, 1.5), the
  default gate (and, with --asr, the Whisper base round trip);
- catch rate: each of those takes broken on purpose (``voxcache.testing.faulty``:
  runaway, truncated, silent, clipped, NaN, DC, a long pause), and for the ASR a take of
  other words;
- cost per stored take: the signal checks and the ASR round trip, each as milliseconds
  and as a share of the render, side by side in one run;
- keys with digits: the hot phrases replayed through a cache (segment mode, as Piper
  serves) with ``never_store = ["digits", "numbers"]`` and without; the share of stored
  keys whose text holds a digit or a number in words.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from voxcache import Cache, CachedEngine, SynthesisRequest
from voxcache.policies.admit import AdmissionSettings, GateSettings, QualitySettings
from voxcache.policies.admit.classes import TextRules
from voxcache.policies.admit.gate import Gate
from voxcache.testing.faulty import broken

from ..helpers.fixtures import HOT_PHRASES

HOT = HOT_PHRASES
FAULTS = ("runaway", "truncated", "silent", "clipped", "nonfinite", "dc", "gap")
SPEEDS = (0.75, 1.0, 1.5)


def phrases() -> list[dict[str, object]]:
    return list(json.loads(HOT.read_text(encoding="utf-8"))["phrases"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--asr", action="store_true", help="also the Whisper round trip")
    args = parser.parse_args()
    from voxcache.engines.piper import PiperEngine

    piper = PiperEngine(threads=2)
    folder = Path(tempfile.mkdtemp(prefix="vx-admission-"))
    signal_gate = Gate(GateSettings(), Cache(folder / "signal"), speech=True)
    asr_gate = Gate(GateSettings(quality=QualitySettings(asr=True)), Cache(folder / "asr"),
                    speech=True) if args.asr else None
    english = [str(p["text"]) for p in phrases() if p.get("language", "en") == "en"]
    figures = measure(piper, folder, english, signal_gate, asr_gate)
    report(figures, english, signal_gate, asr_gate)
    replay(piper, folder)


def measure(piper: object, folder: Path, english: list[str], signal_gate: Gate,
            asr_gate: Gate | None) -> dict[str, list]:
    """Render each phrase at each speed; time the render, the checks and the ASR."""
    cached = CachedEngine(piper, Cache(folder / "render"),  # type: ignore[arg-type]
                          gate=GateSettings(quality=QualitySettings(enabled=False)))
    figures: dict[str, list] = {name: [] for name in (
        "takes", "render", "check", "asr", "refused_signal", "refused_asr")}
    for text in english:
        for speed in SPEEDS:
            request = SynthesisRequest(text, speed=speed)
            started = time.perf_counter()
            result = cached.synthesize(request, mode="bypass")
            figures["render"].append(time.perf_counter() - started)
            resolved = cached.resolve(request)
            figures["takes"].append((resolved, result.audio))
            started = time.perf_counter()
            found = signal_gate.quality_refusal(result.audio, resolved)
            figures["check"].append(time.perf_counter() - started)
            if found:
                figures["refused_signal"].append((text, speed, found))
            if asr_gate is not None:
                started = time.perf_counter()
                heard = asr_gate._asr(result.audio, resolved)  # the round trip alone
                figures["asr"].append(time.perf_counter() - started)
                if heard:
                    figures["refused_asr"].append((text, speed, heard))
    return figures


def report(figures: dict[str, list], english: list[str], signal_gate: Gate,
           asr_gate: Gate | None) -> None:
    """Print false refusals, catch rates and the cost per take, side by side."""
    takes = figures["takes"]
    n = len(takes)
    print(f"Piper takes: {n} ({len(english)} phrases x speeds {SPEEDS})")
    print(f"false refusals, signal checks: {len(figures['refused_signal'])}/{n} "
          f"{figures['refused_signal']}")
    if asr_gate is not None:
        print(f"false refusals, ASR round trip: {len(figures['refused_asr'])}/{n} "
              f"{figures['refused_asr']}")
    for fault in FAULTS:
        count = sum(1 for resolved, audio in takes if signal_gate.quality_refusal(
            broken(audio.samples().astype(np.float32) / 32768.0, fault, audio.sample_rate),
            resolved))
        print(f"catch rate {fault:>9}: {count}/{n} = {count / n:.0%}")
    if asr_gate is not None:
        firsts = takes[:: len(SPEEDS)]
        wrong = sum(bool(asr_gate._asr(firsts[(i + 7) % len(firsts)][1], resolved))
                    for i, (resolved, _audio) in enumerate(firsts))
        print(f"catch rate other words (ASR): {wrong}/{len(firsts)}")
    render = statistics.median(figures["render"])
    check = statistics.median(figures["check"])
    print(f"render per take (median): {render * 1000:.0f} ms")
    print(f"signal checks per take (median): {check * 1000:.2f} ms = {check / render:.2%} "
          "of the render")
    if figures["asr"]:
        asr = statistics.median(figures["asr"])
        print(f"ASR per take (median): {asr * 1000:.0f} ms = {asr / render:.0%} of the render; "
              f"ASR / signal checks = {asr / check:.0f}x")


def replay(piper: object, folder: Path) -> None:
    """Every hot phrase Piper speaks, asked three times, through segment-mode caches with
    the number rule on and off: the share of stored keys whose text has a number."""
    numbers = TextRules(["digits", "numbers"])
    english = [p for p in phrases() if p.get("language", "en") == "en"]
    for name, never in (("off", ()), ("on", ("digits", "numbers"))):
        gate = GateSettings(admission=AdmissionSettings(never_store=never))
        cache = Cache(folder / f"replay-{name}")
        cached = CachedEngine(piper, cache, segments=True, gate=gate)  # type: ignore[arg-type]
        for _ in range(3):
            for phrase in english:
                cached.synthesize(SynthesisRequest(str(phrase["text"])))
        cache.folder.flush()
        texts = [row.text for row in cache.folder.index.rows("kind = 'audio'")]
        with_numbers = sum(1 for text in texts if numbers.match(text))
        print(f"replay, rule {name}: {len(texts)} stored keys, {with_numbers} with a digit or "
              f"a number in words = {with_numbers / max(1, len(texts)):.0%}")
        cache.close()


if __name__ == "__main__":
    main()
