"""The engine protocol: what voxcache needs to know about a TTS engine.

An engine has an id, a model revision (part of every key, so a new model never
serves old audio), a sample rate, declared parameters, and ``render`` which
yields canonical PCM one sentence at a time. Capability flags let the request
resolver refuse fields an engine would otherwise silently ignore.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import ClassVar

from .audio import Audio
from .errors import EngineError, VoxcacheError
from .params import ParamSpec
from .redact import redact
from .resolved import ResolvedRequest


class Engine:
    """Base class for engines; subclasses set the attributes and implement ``render``."""

    id: str = "engine"
    model_revision: str = "unversioned"
    sample_rate: int = 22050
    params: ClassVar[Mapping[str, ParamSpec]] = {}
    languages: tuple[str, ...] = ("en",)
    default_language: str = "en"
    voices: Mapping[str, str] = {}
    """Accepted voice names (aliases included) → canonical voice name."""
    default_voice: str | None = None
    supports_reference: bool = False
    """True when the engine clones a voice from reference audio."""
    supports_instruct: bool = False
    supports_seed: bool = False
    """True when an explicit seed makes the engine's output reproducible."""
    streams_from_server: bool = False
    """True when ``render`` yields audio as a remote server sends it (a gateway's upstream
    that streams): the OpenAI route then sends a miss as it arrives, as OpenAI's own
    server streams its bodies, instead of after the last chunk."""
    segments_context_free: bool = True
    """False when a sentence's audio depends on neighbouring text; such an engine must
    also override ``segment_context`` or segment mode is refused for it."""
    segment_gap: float = 0.0
    """Seconds of silence the engine itself puts between sentences (Piper: none)."""

    def split_sentences(self, text: str) -> list[str] | None:
        """Split ``text`` exactly as ``render`` does, one chunk per part, or None.

        None (the default) means "cannot promise the same split" and keeps the
        request whole: a wrong split would stitch audio the engine never makes.
        """
        return None

    def segment_context(self, segments: list[str], index: int) -> dict[str, object] | None:
        """The neighbouring text segment ``index`` is conditioned on (None: undeclared).

        Only consulted for engines that are not ``segments_context_free``; what it
        returns goes into the segment's key, so a sentence is reused only where its
        context is the same.
        """
        return None

    def render(self, request: ResolvedRequest) -> Iterator[Audio]:
        """Yield the take one chunk (sentence) at a time, in order."""
        raise NotImplementedError

    def describe(self) -> dict[str, object]:
        """Return a JSON-friendly summary for logs, `explain` and the API."""
        return {
            "id": self.id,
            "model_revision": self.model_revision,
            "sample_rate": self.sample_rate,
            "voices": sorted(set(self.voices.values())),
            "languages": list(self.languages),
            "params": [spec.describe() for spec in self.params.values()],
        }


def render_chunks(engine: Engine, request: ResolvedRequest) -> Iterator[Audio]:
    """Yield an engine's chunks, translating its own failures (and silence) into EngineError.

    The one boundary where an engine's foreign exceptions become voxcache errors: every
    render path goes through it, so a crashed model is a 5xx with the engine's message
    and never a half-built entry.
    """
    produced = False
    try:
        for chunk in engine.render(request):
            produced = True
            yield chunk
    except VoxcacheError:
        raise
    except Exception as exc:
        raise EngineError(f"engine {engine.id!r} failed: {redact(str(exc))}") from exc
    if not produced:
        raise EngineError(f"engine {engine.id!r} produced no audio")
