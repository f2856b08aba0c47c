"""Joins between clauses that a listener should not hear.

A clause rendered alone ends in the engine's own end-of-utterance silence and is
loudness-normalised on its own (Piper scales each chunk to full peak). At a clause join
the tail and head silences are cut, the pause the engine itself makes at that mark is
put back — learned from the engine's own whole renders of probe sentences, once per
voice and model revision, stored as a ``prompt`` tensor artifact through the load-once
path — the next clause is brought to the loudness of the one before it, and both edges
get a 5 ms fade. Each clause is handed out as soon as it and those before it exist.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..audio import Audio
from ..engine import JoinRule
from ..entry import Entry
from ..key import digest
from ..loading import Made
from ..outcome import Progress
from ..resolved import ResolvedRequest
from ..tensors import load_tensors, tensor_entry
from .pipeline import Pipeline

FRAME = 0.010
"""Seconds per analysis frame."""
SILENCE_DB = -40.0
"""A frame quieter than this, relative to the loudest frame, is silence."""
FADE = 0.005
MAX_GAIN_DB = 6.0
PROBES = {
    "en": ["Thanks for waiting{} your order has shipped.",
           "If you have the number ready{} I can look it up now."],
    "zh": ["感谢您的耐心等待{}您的订单已经发货。", "如果您有订单号{}我现在就可以查询。"],
}
"""Probe sentences: each rendered whole with every mark between its halves."""
LEARNED_MARKS = (",", ";", ":", "—")
_WRITTEN = {"en": {",": ", ", ";": "; ", ":": ": ", "—": " — "},
            "zh": {",": "，", ";": "；", ":": "：", "—": "——"}}
LEVEL = "level_offset_db"
"""The profile's loudness entry: dB that brings clauses stitched under the level rule to the
engine's own whole render (Piper: about −1 dB, each clause alone being peak-normalised)."""
PROFILE_TEXT = "voxcache.join_pauses/3"
"""Stands in for the text in the profile's key (the rest is the request's voice, speed,
waveform parameters, tenant and the model revision: a new revision learns again)."""


def frames_db(audio: Audio) -> np.ndarray:
    """Level of each 10 ms frame in dB relative to full scale."""
    x = audio.samples().astype(np.float64) / 32768.0
    if audio.channels > 1:
        x = x.reshape(-1, audio.channels).mean(axis=1)
    n = max(1, int(audio.sample_rate * FRAME))
    whole = len(x) // n
    if whole == 0:
        return np.array([-120.0])
    rms = np.sqrt(np.mean(x[: whole * n].reshape(whole, n) ** 2, axis=1))
    return 20 * np.log10(np.maximum(rms, 1e-6))


def voiced(levels: np.ndarray) -> np.ndarray:
    """Which frames are speech (within ``SILENCE_DB`` of the loudest)."""
    return levels > levels.max() + SILENCE_DB


def interior_pauses(audio: Audio) -> list[float]:
    """Lengths (s) of the silent runs between the first and last speech frame, in order."""
    speech = voiced(frames_db(audio))
    found = np.flatnonzero(speech)
    if found.size == 0:
        return []
    runs, length = [], 0
    for is_speech in speech[found[0]:found[-1] + 1]:
        if is_speech:
            if length:
                runs.append(length * FRAME)
            length = 0
        else:
            length += 1
    return runs


def speech_level(audio: Audio) -> float:
    """Mean power (dB) of the speech frames: what the loudness match compares."""
    levels = frames_db(audio)
    speech = levels[voiced(levels)]
    return float(10 * np.log10(np.mean(10 ** (speech / 10)))) if speech.size else -120.0


def pause_profile(pipeline: Pipeline, resolved: ResolvedRequest) -> dict[str, float]:
    """Seconds of pause the engine makes at each mark for this voice and revision; learned
    once (the longest inner pause of each probe rendered whole, median over probes) and
    loaded from the cache after that."""
    probe = replace(resolved, text=PROFILE_TEXT, seed=None)  # not one profile per seed
    key = digest(pipeline.key_payload(probe, kind="join_pauses"))
    value, _ = pipeline.loader.load(key, "prompt", _Profile(pipeline, probe, key),
                                    wait=pipeline.lock_wait)
    return value


class _Profile:
    """The load-once recipe of a pause profile (``loading.Recipe``)."""

    def __init__(self, pipeline: Pipeline, probe: ResolvedRequest, key: str) -> None:
        self.pipeline, self.probe, self.key = pipeline, probe, key

    def found(self, entry: Entry, tier: str, inside_lock: bool) -> dict[str, float] | None:
        arrays = load_tensors(entry)
        if {"pause_seconds", "level_offset_db"} - set(arrays) or arrays[
                "pause_seconds"].shape != (len(LEARNED_MARKS),):
            return None  # not a profile this version reads: learn it again
        learned = dict(zip(LEARNED_MARKS, map(float, arrays["pause_seconds"]), strict=True))
        return {**learned, LEVEL: float(arrays["level_offset_db"][0])}

    def make(self, sink: Progress) -> Made[dict[str, float]]:
        started = time.perf_counter()
        language = "zh" if self.probe.language.lower().startswith(("zh", "ja")) else "en"
        learned, offsets = [], []
        for mark in LEARNED_MARKS:
            seen = []
            for template in PROBES[language]:
                text = template.format(_WRITTEN[language][mark])
                whole = self._render(text)
                seen.append(max(interior_pauses(whole), default=0.0))
                # the halves alone, joined as ClauseJoin would, against the whole: one
                # pair is noisy (a sampling engine), the median of eight is steady
                head, tail = text.split(_WRITTEN[language][mark], 1)
                halves = [self._render(head + _WRITTEN[language][mark].strip()),
                          self._render(tail)]
                joined = stitch(halves, [mark, ""], {mark: seen[-1]}, 0.0)
                offsets.append(speech_level(whole) - speech_level(joined))
            learned.append(float(np.median(seen)))
        offset = float(np.clip(np.median(offsets), -MAX_GAIN_DB, MAX_GAIN_DB))
        entry = tensor_entry(self.key, "prompt",
                             {"pause_seconds": np.array(learned, dtype=np.float32),
                              "level_offset_db": np.array([offset], dtype=np.float32)},
                             meta={"extractor": "voxcache.join_pauses", "marks":
                                   list(LEARNED_MARKS), "engine": self.probe.engine_id,
                                   "model": self.probe.model_revision,
                                   "compute_seconds": round(time.perf_counter() - started, 3)})
        return Made({**dict(zip(LEARNED_MARKS, learned, strict=True)), LEVEL: offset}, entry,
                    self.probe.tenant)

    def _render(self, text: str) -> Audio:
        return Audio.join(list(self.pipeline.render(replace(self.probe, text=text))))

    def admit(self, made: Made[dict[str, float]]) -> Made[dict[str, float]]:
        return made

    def published(self, made: dict[str, float], held: Entry | None) -> dict[str, float]:
        return made

    def joined(self, value: dict[str, float], sink: Progress,
               replayed: int) -> dict[str, float]:
        return value


class ClauseJoin:
    """The join rule of a clause plan: piece ``i`` is followed by ``marks[i]`` ("" for a
    sentence join, which stays the engine's own ``JoinRule``). Called on the pieces in
    order, it returns each as heard, so ``Audio.join`` of what it returns is the take.

    Level rule: an engine that normalises each render (Piper: to full peak) makes a clause
    alone louder than inside its sentence, the more so the less its peak stands out. A
    clause is brought down to the quietest clause of its sentence so far (known when it is
    streamed; the quietest clause is the one whose peak set the whole render's scale), plus
    the learned offset."""

    def __init__(self, marks: list[str], pauses: dict[str, float], gap: float) -> None:
        self.marks = marks
        self.pauses = pauses
        self._sentences = JoinRule(gap)
        self._index = 0
        self._level: float | None = None

    def __call__(self, part: Audio) -> Audio:
        i = self._index
        self._index += 1
        before = self.marks[i - 1] if i else ""
        after = self.marks[i] if i < len(self.marks) else ""
        x = part.samples().astype(np.float32)
        rate = part.sample_rate * part.channels
        levels = frames_db(part)
        speech = np.flatnonzero(voiced(levels))
        step = max(1, int(part.sample_rate * FRAME)) * part.channels
        head = int(speech[0]) * step if before and speech.size else 0
        tail = (int(speech[-1]) + 1) * step if after and speech.size else x.size
        x = x[head:max(head, tail)]
        own = speech_level(part)
        if not before or self._level is None:
            self._level = own
        if (before or after) and speech.size:  # inside a clause-joined sentence: the level rule
            self._level = min(self._level, own)
            gain_db = float(np.clip(self._level - own + self.pauses.get(LEVEL, 0.0),
                                    -MAX_GAIN_DB, MAX_GAIN_DB))
            peak = float(np.abs(x).max()) if x.size else 0.0
            if peak:
                gain_db = min(gain_db, 20 * np.log10(32767.0 / peak))
            x = x * 10 ** (gain_db / 20)
        fade = min(int(FADE * rate), x.size // 2)
        if fade:
            ramp = np.linspace(0.0, 1.0, fade, dtype=np.float32)
            if before:
                x[:fade] *= ramp
            if after:
                x[-fade:] *= ramp[::-1]
        out = Audio(np.round(x).astype("<i2").tobytes(), part.sample_rate, part.channels,
                    part.nonfinite)
        if not before:
            return self._sentences(out)
        pause = int(round(self.pauses.get(before, 0.0) * part.sample_rate)) * part.channels
        return Audio.join([Audio(b"\0\0" * pause, part.sample_rate, part.channels), out])


def stitch(parts: list[Audio], marks: list[str], pauses: dict[str, float],
           gap: float) -> Audio:
    """The pieces joined (what streaming them hands out, joined)."""
    rule = ClauseJoin(marks, pauses, gap)
    return Audio.join([rule(p) for p in parts])
