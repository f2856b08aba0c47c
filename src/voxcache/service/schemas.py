"""Request bodies of the HTTP API (pydantic), kept apart from the routes that use them.

Unknown fields are refused (``extra="forbid"``): a misspelt parameter silently
ignored would serve audio rendered with settings the caller did not ask for.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CacheMode = Literal["use", "bypass", "refresh"]


class VoiceRef(BaseModel):
    """OpenAI's custom-voice form: ``{"id": "vc_..."}``."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1, max_length=200)


class SpeechRequest(BaseModel):
    """OpenAI ``CreateSpeechRequest`` plus voxcache's optional extensions."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = Field(None, max_length=200,
                              description="engine id, or an OpenAI model name (tts-1, "
                                          "gpt-4o-mini-tts…) meaning the configured engine")
    input: str = Field(max_length=100_000, description="text to speak")
    voice: str | VoiceRef | None = Field(
        None, description="an engine voice, an OpenAI voice name (an alias), or an uploaded "
                          "voice id (vc_…)")
    response_format: str = Field("mp3", max_length=20)
    speed: float = Field(1.0, description="0.25 to 4.0")
    instructions: str | None = Field(None, max_length=4096)
    stream_format: Literal["audio", "sse"] = "audio"
    # voxcache extensions (the official client can send them through extra_body)
    language: str | None = Field(None, max_length=35)
    seed: int | None = None
    params: dict[str, Any] = Field(default_factory=dict,
                                   description="engine parameters (see GET /v1/engine)")
    seed_policy: str | None = Field(None, max_length=40,
                                    description="unseeded requests: pin, bypass or variants:N "
                                                "(default: the server's)")
    cache: CacheMode = "use"


class SynthesizeRequest(BaseModel):
    """The native request: every field of the core ``SynthesisRequest``."""

    model_config = ConfigDict(extra="forbid")
    text: str = Field(max_length=100_000)
    voice: str | None = Field(None, max_length=200)
    reference_audio: str | None = Field(None, description="base64 WAV/FLAC/OGG clip to clone")
    prompt_text: str | None = Field(None, max_length=4096)
    language: str | None = Field(None, max_length=35)
    instruct: str | None = Field(None, max_length=4096)
    seed: int | None = None
    speed: float = 1.0
    params: dict[str, Any] = Field(default_factory=dict)
    ttl: float | None = None
    seed_policy: str | None = Field(None, max_length=40,
                                    description="unseeded requests: pin, bypass or variants:N "
                                                "(default: the server's)")
    response_format: str = Field("wav", max_length=20)
    stream: bool = Field(False, description="stream a miss sentence by sentence (pcm, wav)")
    cache: CacheMode = "use"
