"""Benchmark 7: what computing a key costs — texts short and long, reference clips of 3 and 30 s.

voxcache hashes canonical JSON with BLAKE3 and identifies a reference clip by its decoded
PCM (so a re-saved clip still hits). The raw-hash rows put BLAKE3 beside SHA-256 and MD5
(the recipe of the original CosyVoice write-up) on the same bytes, in the same run; the
voxcache rows show what the full key path adds on top (resolution, JSON, decoding).
"""

from __future__ import annotations

import hashlib
import io
import itertools
from collections.abc import Callable
from typing import Any

import blake3
import numpy as np

from voxcache.audio import fingerprint_reference
from voxcache.cache import Cache
from voxcache.cached import CachedEngine
from voxcache.engines.tone import ToneEngine
from voxcache.key import canonical_bytes, key_payload
from voxcache.request import SynthesisRequest

from ..helpers import plots
from ..helpers.core import Context, Stats, ratio, sample

NAME = "keycost"
TITLE = "7. Key cost: BLAKE3 vs SHA-256 vs MD5"

SHORT = "Your order is ready."
LONG = " ".join(["The next train to the airport departs from platform four in six minutes; "
                 "please mind the gap and keep your belongings with you at all times."] * 13)
HASHES: dict[str, Callable[[bytes], Any]] = {
    "BLAKE3": lambda b: blake3.blake3(b).digest(),
    "SHA-256": lambda b: hashlib.sha256(b).digest(),
    "MD5": lambda b: hashlib.md5(b).digest(),
}


def wav_clip(seconds: float, seed: int, rate: int = 24000) -> bytes:
    """A mono 16-bit WAV of noise, as a user's reference upload would arrive."""
    import soundfile

    rng = np.random.default_rng(seed)
    samples = (rng.standard_normal(int(seconds * rate)) * 0.1).astype(np.float32)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def text_rows(ctx: Context, cached: CachedEngine) -> list[dict[str, Any]]:
    """Key cost for a short and a long text."""
    rows = []
    n = ctx.pick(500, 5000)
    waveform = frozenset(p for p, spec in cached.engine.params.items() if spec.shapes_waveform)
    for label, text in (("text, 20 chars", SHORT), (f"text, {len(LONG)} chars", LONG)):
        request = SynthesisRequest(text, voice="alto")
        data = canonical_bytes(key_payload(cached.resolve(request), waveform))
        stats = raw_hashes(data, n)
        stats["voxcache key, cold (resolve + JSON + BLAKE3)"] = sample(
            lambda r=request: cached.key_of(cached.resolve(r)), n)
        stats["voxcache key, memoised (resolve_and_key)"] = sample(
            lambda r=request: cached.resolve_and_key(r), n)
        rows += _rows(label, f"{len(data)} B hashed", stats)
    return rows


def clip_rows(ctx: Context, cached: CachedEngine) -> list[dict[str, Any]]:
    """Fingerprint cost for reference clips: first sight (decode) and seen before (memo)."""
    rows = []
    for seconds in (3, 30):
        n = ctx.pick(10, 60) if seconds == 30 else ctx.pick(30, 200)
        clips = [wav_clip(seconds, seed) for seed in range(n + 3)]
        data = clips[0]
        stats = raw_hashes(data, n)
        stats.update(fingerprints(clips, n))
        request = SynthesisRequest(SHORT, reference_audio=data)
        stats["voxcache key with this clip (resolve_and_key, clip seen)"] = sample(
            lambda r=request: cached.resolve_and_key(r), n)
        rows += _rows(f"reference clip, {seconds} s", f"{len(data):,} B WAV", stats)
    return rows


def raw_hashes(data: bytes, n: int) -> dict[str, Stats]:
    """Each algorithm over the same bytes."""
    return {name: sample(lambda f=f: f(data), n) for name, f in HASHES.items()}


def fingerprints(clips: list[bytes], n: int) -> dict[str, Stats]:
    """voxcache's clip fingerprint, first sight (decode) and seen before (memo hit)."""
    fresh = itertools.cycle(clips)  # every clip is new to the fingerprint memo once
    return {
        "voxcache fingerprint, first sight (decode + BLAKE3 of PCM)": sample(
            lambda: fingerprint_reference(next(fresh)), n, warmup=3),
        "voxcache fingerprint, seen before (BLAKE3 of file, memo)": sample(
            lambda: fingerprint_reference(clips[0]), n),
    }


def _rows(case: str, what: str, stats: dict[str, Stats]) -> list[dict[str, Any]]:
    base = stats["BLAKE3"].median
    return [{"input": case, "bytes": what, "subject": name, **s.us(),
             "× BLAKE3": ratio(s.median, base)} for name, s in stats.items()]


def run(ctx: Context) -> None:
    """Measure texts and clips; table and plot."""
    cache = Cache(ctx.scratch("cache"))  # keys only: nothing is stored
    try:
        cached = CachedEngine(ToneEngine(), cache)
        rows = text_rows(ctx, cached) + clip_rows(ctx, cached)
    finally:
        cache.close()
    ctx.table("keycost", "Key computation cost (µs)", rows,
              notes=["Raw-hash rows hash the canonical key bytes (texts) or the uploaded file "
                     "bytes (clips) with each algorithm, single-threaded."])
    inputs = list(dict.fromkeys(r["input"] for r in rows))
    series = {h: [next(r["median_us"] for r in rows if r["input"] == i and r["subject"] == h)
                  for i in inputs] for h in HASHES}
    ctx.plot("hashes", plots.grouped_bars(inputs, series, "median µs (log)",
                                          "Hashing the key input: BLAKE3 vs SHA-256 vs MD5"))
