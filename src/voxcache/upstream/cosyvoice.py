"""CosyVoice's FastAPI server (``runtime/python/fastapi/server.py``) as an upstream.

The server has one route per mode, each taking form fields, and answers raw
little-endian int16 mono PCM with no header and no sample rate — the rate is
the model's (22050 Hz for CosyVoice 1, 24000 Hz for CosyVoice 2/3), so the
operator states it (``sample_rate``; 24000 by default, the server's default
model being CosyVoice2-0.5B). The mode follows from the request:

============================  ======================================================
request                       route
============================  ======================================================
voice                         ``/inference_sft`` (tts_text, spk_id)
voice + instruct              ``/inference_instruct`` (… instruct_text; v1 Instruct)
reference + prompt text       ``/inference_zero_shot`` (tts_text, prompt_text, prompt_wav)
reference, no prompt text     ``/inference_cross_lingual`` (tts_text, prompt_wav)
reference + instruct          ``/inference_instruct2`` (tts_text, instruct_text, prompt_wav)
============================  ======================================================

The server takes no speed, seed or language (it detects the language and seeds
itself at random), so those are refused rather than silently dropped, and every
take is one random sample that the cache then pins. It does not list its
speakers either: ``voices`` names them (CosyVoice-300M-SFT's seven by
default). The model directory behind the URL is not reported; set ``revision``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..audio import Audio
from ..errors import InvalidParameter
from ..request import ResolvedRequest
from .base import UpstreamEngine
from .decode import pcm_stream

SFT_SPEAKERS = ("中文女", "中文男", "日语男", "粤语女", "英文女", "英文男", "韩语女")
"""The speakers of CosyVoice-300M-SFT's spk2info (``list_available_spks``)."""
DEFAULT_SAMPLE_RATE = 24000


def cosyvoice_route(request: ResolvedRequest) -> tuple[str, dict[str, str]]:
    """Choose the server route and its text form fields for a resolved request."""
    fields = {"tts_text": request.text}
    if request.reference_fingerprint is None:
        if request.voice is None:
            raise InvalidParameter("CosyVoice needs a speaker (voice) or reference audio")
        fields["spk_id"] = request.voice
        if request.instruct:
            return "/inference_instruct", fields | {"instruct_text": request.instruct}
        return "/inference_sft", fields
    if request.instruct:
        return "/inference_instruct2", fields | {"instruct_text": request.instruct}
    if request.prompt_text:
        return "/inference_zero_shot", fields | {"prompt_text": request.prompt_text}
    return "/inference_cross_lingual", fields


class CosyVoiceEngine(UpstreamEngine):
    """Renders misses on a CosyVoice FastAPI server."""

    kind = "cosyvoice"
    languages = ("auto",)
    default_language = "auto"
    supports_reference = True
    supports_instruct = True
    supports_seed = False

    def __init__(self, url: str, *, sample_rate: int = DEFAULT_SAMPLE_RATE,
                 voices: Sequence[str] = SFT_SPEAKERS, default_voice: str | None = None,
                 **options: Any) -> None:
        super().__init__(url, **options)
        self.sample_rate = int(sample_rate)
        self.voices = {name: name for name in voices}
        self.default_voice = default_voice or (voices[0] if voices else None)
        self.model_revision = self.identity(f"sr={self.sample_rate}")

    def speed_supported(self) -> bool:
        """The FastAPI server passes no speed to the model."""
        return False

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """POST the form (with the clip as ``prompt_wav``) and read the raw PCM answer."""
        self.refuse_unhonoured(request)
        route, fields = cosyvoice_route(request)
        files = None
        if request.reference_audio is not None:
            files = {"prompt_wav": ("prompt.wav", request.reference_audio, "audio/wav")}
        with self.client.stream("POST", route, data=fields, files=files) as chunks:
            yield from pcm_stream(chunks, self.sample_rate)
