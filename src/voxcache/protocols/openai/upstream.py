"""Any OpenAI-compatible speech server (``POST /v1/audio/speech``) as an upstream.

The gateway always asks for ``wav`` (lossless, and the header carries the rate, which
``pcm`` leaves to guesswork); ``model`` is in the revision (compatible servers map names as
they like); voices come from ``GET /v1/audio/voices``, else OpenAI's names, else the
operator's; ``instructions`` only where the operator says the model takes it. The upstream
refusing the request itself (400/404/413/422) is a refusal here too (``InvalidParameter``);
refusing voxcache's key or failing is a 502. docs/operating/gateway.md, "OpenAI-compatible servers".
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...audio import Audio
from ...errors import InvalidParameter, UpstreamError
from ...request import ResolvedRequest
from ...upstream.base import UpstreamEngine, headers_option
from ...upstream.decode import wav_stream
from .fields import OPENAI_VOICES

CALLER_FAULTS = (400, 404, 413, 422)
"""Upstream statuses that mean "this request cannot be rendered as sent"."""


class OpenAISpeechEngine(UpstreamEngine):
    """Renders misses on an OpenAI-compatible ``/v1/audio/speech`` endpoint."""

    kind = "openai"
    sample_rate = 24000
    languages = ("auto",)
    default_language = "auto"
    supports_reference = False
    supports_seed = False
    streams_from_server = True

    def __init__(self, url: str, *, model: str = "tts-1", api_key: str | None = None,
                 voices: Sequence[str] | None = None, default_voice: str | None = None,
                 instructions: bool = False, **options: Any) -> None:
        headers = dict(headers_option(options.pop("headers", None)) or {})
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        super().__init__(url, headers=headers or None, **options)
        self.path = "/audio/speech" if self.url.endswith("/v1") else "/v1/audio/speech"
        self.model = model
        names = list(voices) if voices else self._discover_voices() or list(OPENAI_VOICES)
        self.voices = {name: name for name in names}
        self.default_voice = default_voice or names[0]
        self.supports_instruct = instructions
        self.model_revision = self.identity(f"model={model}")

    def _discover_voices(self) -> list[str]:
        """Ask the server for its voices; servers without the route get OpenAI's names."""
        try:
            data = self.client.get_json(self.path.replace("/speech", "/voices"))
        except UpstreamError as exc:
            if exc.upstream_status is None:
                raise
            return []
        items = data.get("voices", []) if isinstance(data, dict) else data
        names = [v.get("id") or v.get("name") if isinstance(v, dict) else v for v in items]
        return [str(n) for n in names if n]

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Ask for the take as WAV and pass samples on as they arrive."""
        self.refuse_unhonoured(request)
        body: dict[str, Any] = {"model": self.model, "input": request.text,
                                "voice": request.voice, "response_format": "wav",
                                "speed": request.speed}
        if request.instruct:
            body["instructions"] = request.instruct
        try:
            with self.client.stream("POST", self.path, json=body) as chunks:
                yield from wav_stream(chunks)
        except UpstreamError as exc:
            if exc.upstream_status not in CALLER_FAULTS:
                raise
            reason = str(exc).partition(f"answered {exc.upstream_status}: ")[2]
            raise InvalidParameter(f"the upstream speech server refused this request "
                                   f"({exc.upstream_status}): {reason or 'no reason given'}"
                                   ) from None
