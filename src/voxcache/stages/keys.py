"""What a stage artifact is a function of, and the key that follows from it.

Keyed by everything it depends on and nothing else: the clip's decoded-PCM fingerprint
(never a path or a name: CosyVoice's ``spk2info`` reused prompts by name, GPT-SoVITS kept
an old voice after its file changed), transcript, language, extractor and revision,
shaping parameters, tenant and kind. Every artifact of one voice records the voice's
*anchor* (tenant + fingerprint) as its parent, so a purge finds them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..key import KEY_SCHEMA_VERSION, digest
from ..tensors import TENSOR_KINDS

STAGE_SCHEMA = 1
"""Bump when what a stage key covers changes (old keys then simply stop matching)."""
DEFAULT_TENANT = "default"
ANCHOR_KIND = "voice"


@dataclass(frozen=True, slots=True)
class StageInputs:
    """Everything one stage artifact depends on."""

    kind: str
    """``embedding``, ``prompt``, ``tokens`` or ``session``."""
    extractor: str
    """What computes it (``resemblyzer``, ``cosyvoice.frontend_zero_shot``, …)."""
    revision: str
    """The extractor's revision: its version and a hash of its weights. A new revision is a
    new key, so features of an old model are never fed to a new one."""
    reference: str = ""
    """The reference clip's decoded-PCM fingerprint (``audio.fingerprint_reference``)."""
    tenant: str = DEFAULT_TENANT
    prompt_text: str = ""
    language: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Any further input that shapes the artifact (a resample rate, a session's chain
    hash, sampling parameters), as JSON scalars."""

    def __post_init__(self) -> None:
        if self.kind not in TENSOR_KINDS:
            raise ValueError(f"stage kind {self.kind!r} is not one of "
                             f"{', '.join(sorted(TENSOR_KINDS))}")
        if not self.extractor or not self.revision:
            raise ValueError("a stage needs an extractor id and its revision: without them, "
                             "a new model would be fed an old model's features")

    def payload(self) -> dict[str, Any]:
        """The dictionary hashed into the key (what an ``explain`` would show)."""
        return {
            "schema": KEY_SCHEMA_VERSION, "stage_schema": STAGE_SCHEMA, "kind": self.kind,
            "tenant": self.tenant, "extractor": self.extractor, "revision": self.revision,
            "reference": self.reference, "prompt_text": self.prompt_text,
            "language": self.language, "params": dict(self.params),
        }

    def key(self) -> str:
        """The content address of this artifact (64 hex digits)."""
        return digest(self.payload())

    @property
    def anchor(self) -> str:
        """The voice anchor of the clip this artifact derives from ('' without a clip)."""
        return voice_anchor(self.tenant, self.reference) if self.reference else ""


def voice_anchor(tenant: str, fingerprint: str) -> str:
    """The key every artifact derived from one tenant's voice names as its parent."""
    return digest({"schema": KEY_SCHEMA_VERSION, "kind": ANCHOR_KIND, "tenant": tenant,
                   "reference": fingerprint})
