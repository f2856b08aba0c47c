"""CosyVoice's FastAPI server (``runtime/python/fastapi/server.py``) as an upstream.

One route per mode (``cosyvoice_route``), form fields with the clip as the file ``prompt_wav``, raw
int16 mono PCM answered as the model yields it and read as it arrives. The server takes no speed,
seed or language (refused, never dropped), knows its speakers alone (any ``spk_id`` is passed on:
``Speakers``) and reports nothing about itself, so the key's model is ``cosyvoice|URL|sr=RATE`` plus
the operator's revision label (docs/operating/gateway.md, "CosyVoice").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ...audio import Audio
from ...errors import InvalidParameter
from ...request import ResolvedRequest
from ...upstream.base import UpstreamEngine
from ...upstream.decode import pcm_stream

SFT_SPEAKERS = ("中文女", "中文男", "日语男", "粤语女", "英文女", "英文男", "韩语女")
"""The speakers of CosyVoice-300M-SFT's spk2info (``list_available_spks``): the names
listed by default, not a limit on what is passed on."""
DEFAULT_SAMPLE_RATE = 24000


class Speakers(Mapping[str, str]):
    """Speaker names as the gateway sees them: a few declared, any one passed on.

    Looking a name up returns the name itself, so request resolution passes every
    ``spk_id`` to the server, which is the one that knows its speakers, and the name
    is in the key as sent. Membership and iteration are the declared names only:
    those are what ``/v1/voices`` lists and what the other routes treat as the
    engine's own voices (so an OpenAI voice name such as ``nova`` still means the
    default speaker there, instead of being sent as a ``spk_id``).
    """

    def __init__(self, declared: Iterable[str]) -> None:
        self._declared = tuple(dict.fromkeys(declared))

    def __getitem__(self, name: str) -> str:
        if not isinstance(name, str) or not name:
            raise KeyError(name)
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)


def cosyvoice_route(request: ResolvedRequest) -> tuple[str, dict[str, str]]:
    """Choose the server route and its text form fields for a resolved request.

    voice → ``/inference_sft`` (tts_text, spk_id); voice + instruct → ``/inference_instruct``
    (v1 Instruct); reference + prompt text → ``/inference_zero_shot``; reference alone →
    ``/inference_cross_lingual``; reference + instruct → ``/inference_instruct2``."""
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
    """Renders misses on a CosyVoice FastAPI server, streaming its PCM as it arrives."""

    kind = "cosyvoice"
    languages = ("auto",)
    default_language = "auto"
    supports_reference = True
    supports_instruct = True
    supports_seed = False
    streams_from_server = True

    def __init__(self, url: str, *, sample_rate: int = DEFAULT_SAMPLE_RATE,
                 voices: Sequence[str] = SFT_SPEAKERS, default_voice: str | None = None,
                 **options: Any) -> None:
        super().__init__(url, **options)
        self.sample_rate = int(sample_rate)
        self.voices = Speakers(voices)
        self.default_voice = default_voice or (voices[0] if voices else None)
        self.model_revision = self.identity(f"sr={self.sample_rate}")

    def speed_supported(self) -> bool:
        """The FastAPI server passes no speed to the model."""
        return False

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """POST the route's form (the clip as the file ``prompt_wav``) and yield the PCM
        as it arrives; a body that breaks off fails the render, so nothing is stored."""
        self.refuse_unhonoured(request)
        route, fields = cosyvoice_route(request)
        files = None
        if request.reference_audio is not None:
            files = {"prompt_wav": ("prompt_wav", request.reference_audio,
                                    "application/octet-stream")}
        with self.client.stream("POST", route, data=fields, files=files) as chunks:
            yield from pcm_stream(chunks, self.sample_rate)
