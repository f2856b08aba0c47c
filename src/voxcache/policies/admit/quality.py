"""The quality gate's signal checks: what a take must be before a cache may pin it.

A cache serves a bad take to everyone, forever (an engine's runaway: vllm-omni issue 3510,
a 4.4 s text came out 46 s long). So each rendered take is checked, in well under a
millisecond per second of audio: ``nonfinite``, ``clipping``, ``dc``, ``silence`` and, for
speech engines, ``runaway``, ``truncated`` and ``inner_silence``. The bounds are wide on
purpose: the gate is for broken takes, not merely worse ones. docs/operating/admission.md has the
bounds and their measurements.
"""

from __future__ import annotations

import re
import unicodedata

import numpy as np

from ...audio import Audio
from .settings import QualitySettings

FULL_SCALE = 32767
CLIPPED_SHARE = 0.005
DC_SHARE = 0.05
SILENCE_DBFS = -45.0
WINDOW_SECONDS = 0.02

_WORD = re.compile(r"[^\W\d_]+|\d+|[^\w\s]", re.UNICODE)
_VOWELS = re.compile(r"[aeiouyàáâãäåæèéêëìíîïòóôõöøùúûüýÿ]+", re.IGNORECASE)


def syllables(text: str) -> tuple[float, float]:
    """(fewest, most) syllables ``text`` may be spoken in: a CJK character is one, an
    alphabetic word its vowel groups (one at least), a number one to three per digit
    (``2026``: "twenty twenty-six" or "two thousand and twenty-six"), a symbol none to
    three (``$``, ``%``, ``@`` are read out; ``!`` is not)."""
    low = high = 0.0
    for token in _WORD.findall(unicodedata.normalize("NFKC", text)):
        if token.isdigit():
            low += 1
            high += 3 * len(token)
        elif token.isalpha():
            cjk = sum(1 for ch in token if _is_cjk(ch))
            rest = token if not cjk else "".join(ch for ch in token if not _is_cjk(ch))
            groups = len(_VOWELS.findall(rest)) if rest else 0
            if rest and not groups:  # a script without Latin vowels: a syllable per 2-3 letters
                groups = max(1, len(rest) // 3)
            low += cjk + (max(1, groups) if rest else 0) * 0.7
            high += cjk + (max(1, groups) if rest else 0) * 1.5
        elif unicodedata.category(token).startswith("S") or token in "@#%&":
            high += 3
    return low, max(high, 1.0)


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return (0x3040 <= code <= 0x30FF or 0x3400 <= code <= 0x9FFF or 0xAC00 <= code <= 0xD7AF
            or 0xF900 <= code <= 0xFAFF or 0x20000 <= code <= 0x2FA1F)


def check(audio: Audio, text: str, speed: float, speech: bool,
          settings: QualitySettings) -> str | None:
    """Why ``audio`` may not be stored as the take of ``text`` (None: it may)."""
    if audio.nonfinite:
        return "nonfinite"
    samples = audio.samples()
    if samples.size == 0:
        return "silence"
    peaks = np.count_nonzero(np.abs(samples.astype(np.int32)) >= FULL_SCALE)
    if peaks > CLIPPED_SHARE * samples.size:
        return "clipping"
    if abs(float(samples.mean())) > DC_SHARE * FULL_SCALE:
        return "dc"
    loud = _loud_windows(samples, audio.sample_rate * audio.channels)
    if not loud.any():
        return "silence"
    if not speech:
        return None
    low, high = syllables(text)
    speed = speed if speed > 0 else 1.0
    duration = audio.duration
    if duration > settings.pad + high / (settings.slowest * speed):
        return "runaway"
    if duration < low / (settings.fastest * speed):
        return "truncated"
    if _longest_quiet(loud) * WINDOW_SECONDS > settings.max_inner_silence:
        return "inner_silence"
    return None


def _loud_windows(samples: np.ndarray, rate: int) -> np.ndarray:
    """Per 20 ms window: whether its RMS rises above ``SILENCE_DBFS``."""
    width = max(1, int(rate * WINDOW_SECONDS))
    count = max(1, samples.size // width)
    frames = samples[:count * width].astype(np.float32)
    if frames.size < width:
        frames = np.pad(frames, (0, width - frames.size))
    power = np.square(frames.reshape(count, width) / 32768.0).mean(axis=1)
    return power > 10 ** (SILENCE_DBFS / 10)


def _longest_quiet(loud: np.ndarray) -> int:
    """The longest run of quiet windows between the first and the last loud one."""
    where = np.flatnonzero(loud)
    if where.size < 2:
        return 0
    gaps = np.diff(where) - 1
    return int(gaps.max()) if gaps.size else 0
