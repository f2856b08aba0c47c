"""A request in canonical form: what keys are made of and what engines render.

Its own module so that the engine protocol (which renders one) and the resolver
(which builds one against an engine) both depend on it without depending on
each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class ResolvedRequest:
    """A request in canonical form, ready for keying and rendering."""

    engine_id: str
    model_revision: str
    tenant: str
    text: str
    voice: str | None
    reference_fingerprint: str | None
    prompt_text: str | None
    language: str
    instruct: str | None
    seed: int | None
    speed: float
    params: Mapping[str, Any]
    """Every declared parameter, defaults filled in."""
    reference_audio: bytes | None = field(default=None, compare=False, repr=False)
    ttl: float | None = field(default=None, compare=False)
    voice_tensor: Any = field(default=None, compare=False, repr=False)
    """A tensor voice in canonical form (``voice`` is then ``tensor:<its fingerprint>``)."""

    def describe(self) -> dict[str, Any]:
        """Descriptive fields kept in a take's envelope (for `ls`, purge by voice, rebuilds)."""
        return {
            "tenant": self.tenant, "engine": self.engine_id, "model": self.model_revision,
            "voice": self.voice or (self.reference_fingerprint or "")[:16],
            "text": self.text[:200], "language": self.language,
        }
