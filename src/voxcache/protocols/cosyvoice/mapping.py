"""CosyVoice FastAPI ``/inference_*`` form fields → a core ``SynthesisRequest``.

One function per route, named after it, taking exactly the route's form fields
(``tts_text``, ``spk_id``, ``prompt_text``, ``prompt_wav`` as bytes,
``instruct_text``). Each maps to the core fields that mean the same thing —
``spk_id`` is the voice, ``prompt_wav`` the reference clip, ``instruct_text``
the instruct — so the configured engine, an upstream CosyVoice or not, decides
what it can honour and refuses the rest with a 400. The reverse mapping (which
route a resolved request needs) is ``upstream.cosyvoice_route``.
"""

from __future__ import annotations

from ...errors import InvalidParameter
from ...request import SynthesisRequest

ROUTES = ("inference_sft", "inference_zero_shot", "inference_cross_lingual",
          "inference_instruct", "inference_instruct2")


def _text(tts_text: str | None) -> str:
    if not tts_text:
        raise InvalidParameter("tts_text is required")
    return tts_text


def _clip(prompt_wav: bytes | None) -> bytes:
    if not prompt_wav:
        raise InvalidParameter("prompt_wav is required: upload the reference clip as a file")
    return prompt_wav


def inference_sft(tts_text: str, spk_id: str, tenant: str = "default") -> SynthesisRequest:
    """A speaker of the model: an upstream CosyVoice is asked for any ``spk_id`` (it is the
    one that knows its speakers); an embedded engine refuses a name it does not have."""
    if not spk_id:
        raise InvalidParameter("spk_id is required")
    return SynthesisRequest(_text(tts_text), voice=spk_id, tenant=tenant)


def inference_zero_shot(tts_text: str, prompt_text: str, prompt_wav: bytes | None,
                        tenant: str = "default") -> SynthesisRequest:
    """Clone the voice of ``prompt_wav``, which says ``prompt_text``."""
    if not prompt_text or not prompt_text.strip():
        raise InvalidParameter("prompt_text is required for zero-shot cloning; without a "
                               "transcript use /inference_cross_lingual")
    return SynthesisRequest(_text(tts_text), reference_audio=_clip(prompt_wav),
                            prompt_text=prompt_text, tenant=tenant)


def inference_cross_lingual(tts_text: str, prompt_wav: bytes | None,
                            tenant: str = "default") -> SynthesisRequest:
    """Clone the voice of ``prompt_wav`` without its transcript."""
    return SynthesisRequest(_text(tts_text), reference_audio=_clip(prompt_wav), tenant=tenant)


def inference_instruct(tts_text: str, spk_id: str, instruct_text: str,
                       tenant: str = "default") -> SynthesisRequest:
    """A speaker of the model told how to speak (CosyVoice-300M-Instruct)."""
    if not spk_id:
        raise InvalidParameter("spk_id is required")
    return SynthesisRequest(_text(tts_text), voice=spk_id, instruct=_instruct(instruct_text),
                            tenant=tenant)


def inference_instruct2(tts_text: str, instruct_text: str, prompt_wav: bytes | None,
                        tenant: str = "default") -> SynthesisRequest:
    """Clone ``prompt_wav`` and follow ``instruct_text`` (CosyVoice 2/3)."""
    return SynthesisRequest(_text(tts_text), reference_audio=_clip(prompt_wav),
                            instruct=_instruct(instruct_text), tenant=tenant)


def _instruct(instruct_text: str | None) -> str:
    if not instruct_text or not instruct_text.strip():
        raise InvalidParameter("instruct_text is required")
    return instruct_text
