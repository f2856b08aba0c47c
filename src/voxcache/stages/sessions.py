"""Decoder state per conversation and per voice prompt: memory only, evicted first.

A decoder's KV cache for a conversation so far lets the next turn read only its new tokens.
Keyed by session id and a hash of the turns so far (an edited or branched conversation never
continues from the wrong past), model and revision, voice and tenant; a voice's prompt
prefix likewise, with no session. ``session`` entries never leave this process's memory
tier and go first under pressure (``tiers.memory.EVICTION_PRIORITY``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import blake3
import numpy as np

from .cache import StageCache, StageResult
from .keys import DEFAULT_TENANT, StageInputs

VOICE_PREFIX = ""
"""The session id under which a voice's prompt-prefix state is kept."""


def chain_hash(turns: Sequence[Any]) -> str:
    """A hash of the turns so far, in order (text, or token ids)."""
    canonical = json.dumps([t if isinstance(t, str) else [int(x) for x in t] for t in turns],
                           separators=(",", ":"), ensure_ascii=False)
    return blake3.blake3(canonical.encode()).hexdigest()


class SessionStates:
    """Decoder state of one model, by (tenant, voice, session, turns so far)."""

    def __init__(self, stages: StageCache, model: str, revision: str) -> None:
        self.stages = stages
        self.model = model
        self.revision = revision

    def inputs(self, session_id: str, turns: Sequence[Any], *, voice: str = "",
               tenant: str = DEFAULT_TENANT) -> StageInputs:
        """What the state after ``turns`` depends on (``voice``: the clip's fingerprint)."""
        return StageInputs("session", self.model, self.revision, voice, tenant,
                           params={"session": session_id, "chain": chain_hash(turns)})

    def lookup(self, session_id: str, turns: Sequence[Any], *, voice: str = "",
               tenant: str = DEFAULT_TENANT) -> StageResult | None:
        """The state after exactly ``turns``, if this process still holds it."""
        inputs = self.inputs(session_id, turns, voice=voice, tenant=tenant)
        return self.stages.lookup(inputs.key(), tenant, "session")

    def keep(self, session_id: str, turns: Sequence[Any], state: Mapping[str, np.ndarray], *,
             voice: str = "", tenant: str = DEFAULT_TENANT,
             compute_seconds: float = 0.0) -> StageResult:
        """Keep the state after ``turns`` (``compute_seconds``: what rebuilding it costs)."""
        inputs = self.inputs(session_id, turns, voice=voice, tenant=tenant)
        return self.stages.put(inputs, state, compute_seconds=compute_seconds)
