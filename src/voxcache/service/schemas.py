"""The native request body (pydantic), kept apart from its route (OpenAI's: protocols.openai).

Unknown fields are refused (``extra="forbid"``): a misspelt parameter silently
ignored would serve audio rendered with settings the caller did not ask for.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..vocabulary import Mode


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
    cache: Mode = Mode.USE
